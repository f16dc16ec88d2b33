package engine

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

func items(kv ...string) []impl.DeliveredItem {
	var out []impl.DeliveredItem
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, impl.DeliveredItem{ID: kv[i], Version: kv[i+1]})
	}
	return out
}

// The table of seed 002, one row at a time.
func TestDiffSeedTable(t *testing.T) {
	assert.Equal(t, []Change{{Op: OpCreate, ID: "file.txt", Version: "sha_v2"}},
		Diff(nil, items("file.txt", "sha_v2")), "app knows nothing -> CREATE")
	assert.Equal(t, []Change{{Op: OpUpdate, ID: "file.txt", Version: "sha_v2"}},
		Diff(items("file.txt", "sha_v1"), items("file.txt", "sha_v2")), "older version -> UPDATE")
	assert.Equal(t, []Change{{Op: OpDelete, ID: "file.txt"}},
		Diff(items("file.txt", "sha_v1"), nil), "deleted -> DELETE")
	assert.Empty(t, Diff(items("file.txt", "sha_v1"), items("file.txt", "sha_v1")), "same -> nothing")

	// All at once, sorted by id.
	assert.Equal(t, []Change{
		{Op: OpCreate, ID: "a", Version: "1"},
		{Op: OpDelete, ID: "b"},
		{Op: OpUpdate, ID: "c", Version: "2"},
		{Op: OpCreate, ID: "e", Version: "1"},
	}, Diff(items("b", "1", "c", "1", "d", "1"), items("a", "1", "c", "2", "d", "1", "e", "1")))
}

func decodeChange(t *testing.T, s Send) Change {
	t.Helper()
	require.True(t, s.Snapshot)
	var c Change
	require.NoError(t, json.Unmarshal(s.Body, &c))
	assert.True(t, strings.HasPrefix(s.EventID, SnapshotEventID(c.Source, c, "")), "event id %q names change %+v", s.EventID, c)
	return c
}

func delivered(t *testing.T, r *rig, app string) []impl.DeliveredItem {
	t.Helper()
	got, err := r.mem.GetDelivered(t.Context(), app, "repo")
	require.NoError(t, err)
	return got
}

func TestSnapshotAppsConvergeIndependently(t *testing.T) {
	r := newRig(t, func(c *Config) { c.JitterFraction = 0; c.MaxAttempts = 10 })
	r.reg = Registry{Bots: []Bot{{ID: "A", Secret: []byte("ka")}, {ID: "B", Secret: []byte("kb")}}}
	r.boot()

	r.step(SourceState{Source: "repo", Apps: []string{"B", "A"}, Items: items("f2", "v1", "f1", "v1")})
	ss := r.takeSends()
	require.Len(t, ss, 2, "one change in flight per app")
	var sa, sb Send
	for _, s := range ss {
		if s.Bot == "A" {
			sa = s
		} else {
			sb = s
		}
	}
	assert.Equal(t, Change{Source: "repo", Op: OpCreate, ID: "f1", Version: "v1"}, decodeChange(t, sa))
	assert.Equal(t, webhook.Sign([]byte("ka"), sa.EventID, sa.Timestamp, sa.Body), sa.Signature)

	// B fails; A goes on.
	r.reply(sb, OutcomeStatus)
	assert.Empty(t, delivered(t, r, "B"), "nothing recorded for a failed delivery")
	r.reply(sa, OutcomeOK)
	assert.Equal(t, items("f1", "v1"), delivered(t, r, "A"), "recorded right after the 2xx")
	sa = r.takeSends()[0]
	assert.Equal(t, Change{Source: "repo", Op: OpCreate, ID: "f2", Version: "v1"}, decodeChange(t, sa))
	r.reply(sa, OutcomeOK)
	assert.Equal(t, items("f1", "v1", "f2", "v1"), delivered(t, r, "A"))
	assert.Empty(t, r.takeSends())

	// The source moves on while B is still failing: f1 updated, f2 deleted.
	r.step(SourceState{Source: "repo", Apps: []string{"A", "B"}, Items: items("f1", "v2")})
	sa = r.takeSends()[0]
	assert.Equal(t, Change{Source: "repo", Op: OpUpdate, ID: "f1", Version: "v2"}, decodeChange(t, sa))
	r.reply(sa, OutcomeOK)
	sa = r.takeSends()[0]
	assert.Equal(t, Change{Source: "repo", Op: OpDelete, ID: "f2"}, decodeChange(t, sa))
	r.reply(sa, OutcomeOK)
	assert.Equal(t, items("f1", "v2"), delivered(t, r, "A"))

	// B's retry sees the current state: it gets f1 at v2 and never hears of
	// f2 ("current state wins"), whatever A went through.
	r.advance(time.Second)
	ss = r.takeSends()
	require.Len(t, ss, 1)
	assert.Equal(t, "B", ss[0].Bot)
	assert.Equal(t, Change{Source: "repo", Op: OpCreate, ID: "f1", Version: "v2"}, decodeChange(t, ss[0]))
	r.reply(ss[0], OutcomeOK)
	assert.Empty(t, r.takeSends())
	assert.Equal(t, delivered(t, r, "A"), delivered(t, r, "B"), "both apps converged")
}

func TestSnapshotRetriesAreBounded(t *testing.T) {
	r := newRig(t, func(c *Config) { c.JitterFraction = 0 })
	r.boot()
	r.step(SourceState{Source: "repo", Apps: []string{"A"}, Items: items("f", "1")})
	attempts := 0
	for range 10 {
		for _, s := range r.takeSends() {
			attempts++
			assert.Equal(t, attempts, s.Attempt)
			r.reply(s, OutcomeRefused)
		}
		r.advance(time.Minute)
	}
	assert.Equal(t, 3, attempts)
	require.Len(t, r.notesOf("dead"), 1)

	// A new source state starts over.
	r.step(SourceState{Source: "repo", Apps: []string{"A"}, Items: items("f", "1")})
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeOK)
	assert.Equal(t, items("f", "1"), delivered(t, r, "A"))
}

func TestSnapshotRecordErrorResends(t *testing.T) {
	r := newRig(t, nil)
	r.boot()
	r.step(SourceState{Source: "repo", Apps: []string{"A"}, Items: items("f", "1")})
	ss := r.takeSends()
	r.st.failNext["RecordDelivered"] = 1
	r.reply(ss[0], OutcomeOK)
	assert.Empty(t, delivered(t, r, "A"))
	r.advance(time.Second)
	again := r.takeSends()
	require.Len(t, again, 1, "unrecorded delivery is sent again")
	assert.Equal(t, ss[0].EventID, again[0].EventID, "as a duplicate the receiver can drop")
	r.reply(again[0], OutcomeOK)
	assert.Equal(t, items("f", "1"), delivered(t, r, "A"))
}

package engine

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

func TestStartSubscribesTrackedStreamsSorted(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots: []Bot{{ID: "b"}},
		Memberships: []Membership{
			member("zeta", "b", pos(5, 0)),
			member("alpha", "b", pos(7, 2)),
			member("alpha", "b", pos(3, 1)), // earliest start of alpha
		},
	}
	rd := r.boot()
	require.Len(t, rd.Subscribes, 2)
	assert.Equal(t, Subscribe{Stream: "alpha", Kind: LogStream, From: pos(3, 1)}, rd.Subscribes[0])
	assert.Equal(t, Subscribe{Stream: "zeta", Kind: LogStream, From: pos(5, 0)}, rd.Subscribes[1])
}

func TestResumeFromCursorAfterRestart(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "cookie-2.0", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 2, 0)))
	for _, s := range r.takeSends() {
		r.reply(s, OutcomeOK)
	}
	c, ok := r.cursor("s")
	require.True(t, ok)
	assert.Equal(t, pos(2, 0), c.Pos)
	assert.Equal(t, []byte("cookie-2.0"), c.Token)
	assert.Equal(t, 2, r.eng.Counters().CursorWrites, "the stream's, and the membership's done marker at boot (joins.go)")

	rd := r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, Subscribe{Stream: "s", Kind: LogStream, From: pos(2, 0), Token: []byte("cookie-2.0")}, rd.Subscribes[0])

	// The upstream replays (here: more than asked); only what lies after the
	// cursor is new.
	r.step(batch("s", "cookie-3.1", logEvent("s", 1, 0), logEvent("s", 2, 0), logEvent("s", 3, 0), logEvent("s", 3, 1)))
	assert.ElementsMatch(t, []string{"s/3.0", "s/3.1"}, sendIDs(r.takeSends()))
	c, _ = r.cursor("s")
	assert.Equal(t, pos(3, 1), c.Pos)
}

func TestCursorOnlyForStreamsWithBots(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("lonely", "c", logEvent("lonely", 1, 0)))
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	all, err := r.mem.ListCursors(t.Context())
	require.NoError(t, err)
	var cs []impl.Cursor
	for _, c := range all {
		if c.Key.Subscriber == "" { // not a membership marker (joins.go)
			cs = append(cs, c)
		}
	}
	require.Len(t, cs, 1)
	assert.Equal(t, "s", cs[0].Key.Stream)
	assert.Equal(t, []string{"s/1.0"}, r.eventIDs("b"), "nothing from the bot-less stream")
}

func TestFreshSyncOnBootBugSkipsSealedEvents(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))

	r.cfg.Bugs.FreshSyncOnBoot = true
	rd := r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.True(t, rd.Subscribes[0].Fresh, "the bug subscribes from the head")
	assert.Equal(t, impl.Position{}, rd.Subscribes[0].From, "ignoring the stored cursor")

	r.cfg.Bugs.FreshSyncOnBoot = false
	rd = r.boot()
	assert.False(t, rd.Subscribes[0].Fresh)
	assert.Equal(t, pos(1, 0), rd.Subscribes[0].From)
}

func TestMembershipTimeline(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots: []Bot{{ID: "A"}, {ID: "B"}},
		Memberships: []Membership{
			member("s", "B", impl.Position{}),
			member("s", "A", pos(1, 1)),
			{Stream: "s", Kind: LogStream, Bot: "B", From: pos(2, 0), Member: false},
			{Stream: "s", Kind: LogStream, Bot: "A", From: pos(3, 0), Member: false},
			member("s", "A", pos(3, 1)),
		},
	}
	r.boot()
	var evs []Event
	for _, p := range []impl.Position{pos(1, 0), pos(1, 1), pos(2, 0), pos(2, 1), pos(3, 0), pos(3, 1), pos(3, 2)} {
		evs = append(evs, logEvent("s", p.Major, p.Minor))
	}
	r.step(batch("s", "c", evs...))
	// A joined after (1,1), left after (3,0), rejoined after (3,1).
	assert.Equal(t, []string{"s/2.0", "s/2.1", "s/3.0", "s/3.2"}, r.eventIDs("A"))
	// B was a member from the start until it left after (2,0).
	assert.Equal(t, []string{"s/1.0", "s/1.1", "s/2.0"}, r.eventIDs("B"))
}

func TestMembershipChangedTracksNewStream(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{Bots: []Bot{{ID: "b", HasKey: true}}}
	rd := r.boot()
	assert.Empty(t, rd.Subscribes)

	rd = r.step(MembershipChanged{Membership: member("s", "b", pos(4, 2))})
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, Subscribe{Stream: "s", Kind: LogStream, From: pos(4, 2)}, rd.Subscribes[0])
	c, ok := r.cursor("s")
	require.True(t, ok, "an initial cursor anchors the stream")
	assert.Equal(t, pos(4, 2), c.Pos)

	// A restart before any event still replays from the membership start.
	r.reg.Memberships = append(r.reg.Memberships, member("s", "b", pos(4, 2)))
	rd = r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, pos(4, 2), rd.Subscribes[0].From)

	r.step(batch("s", "c", logEvent("s", 4, 2), logEvent("s", 4, 3)))
	assert.Equal(t, []string{"s/4.3"}, sendIDs(r.takeSends()), "only events strictly after From are owed")
}

func TestDuplicatedAndReorderedBatch(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 2, 0), logEvent("s", 1, 0), logEvent("s", 2, 0), logEvent("s", 1, 1)))
	assert.Equal(t, []string{"s/1.0", "s/1.1", "s/2.0"}, r.eventIDs("b"))
	assert.Equal(t, 3, r.eng.Counters().Enqueued)
	c, _ := r.cursor("s")
	assert.Equal(t, pos(2, 0), c.Pos)
	r.step(batch("s", "c", logEvent("s", 1, 1), logEvent("s", 2, 0)))
	assert.Equal(t, 3, r.eng.Counters().Enqueued, "a replayed batch changes nothing")
}

func tsBot(r *rig) {
	r.reg = Registry{
		Bots:        []Bot{{ID: "b"}},
		Memberships: []Membership{{Stream: "ts", Kind: TimestampStream, Bot: "b", From: impl.Position{Major: 500}, Member: true}},
	}
}

func tsBatch(evs ...Event) UpstreamBatch {
	return UpstreamBatch{Stream: "ts", Kind: TimestampStream, Events: evs}
}

func TestTimestampCursorTieBreakOnID(t *testing.T) {
	r := newRig(t, nil)
	tsBot(r)
	rd := r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, int64(500-600_000), rd.Subscribes[0].Since, "earliest membership minus the lookback")

	r.step(tsBatch(tsEvent("ts", 1000, "b"), tsEvent("ts", 1000, "a"), tsEvent("ts", 999, "z")))
	c, ok := r.cursor("ts")
	require.True(t, ok)
	assert.Equal(t, impl.Position{Major: 1000, ID: "b"}, c.Pos, "(created_at, id) composite maximum")

	// Same created_at, later id: new. Same id again: a duplicate.
	r.step(tsBatch(tsEvent("ts", 1000, "c"), tsEvent("ts", 1000, "a")))
	assert.Equal(t, []string{"a", "b", "c", "z"}, r.eventIDs("b"))
	c, _ = r.cursor("ts")
	assert.Equal(t, impl.Position{Major: 1000, ID: "c"}, c.Pos)

	// A skewed producer's event arrives late, below the cursor: still owed.
	r.step(tsBatch(tsEvent("ts", 990, "late")))
	assert.Contains(t, r.eventIDs("b"), "late")
	c, _ = r.cursor("ts")
	assert.Equal(t, impl.Position{Major: 1000, ID: "c"}, c.Pos, "the cursor never moves back")

	rd = r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, int64(1000-600_000), rd.Subscribes[0].Since, "resume reaches back by the lookback")
	assert.Equal(t, TimestampStream, rd.Subscribes[0].Kind)
}

func TestTimestampOnlyCursorBugLosesTies(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Bugs.TimestampOnlyCursor = true })
	tsBot(r)
	r.boot()
	r.step(tsBatch(tsEvent("ts", 1000, "b"), tsEvent("ts", 1000, "a")))
	r.step(tsBatch(tsEvent("ts", 1000, "c"), tsEvent("ts", 990, "late")))
	assert.Equal(t, []string{"a", "b"}, r.eventIDs("b"), "the bug drops same-timestamp and late events")

	rd := r.boot()
	assert.Equal(t, int64(1001), rd.Subscribes[0].Since, "the bug resumes after the timestamp with no lookback")
}

func TestCursorAsyncMode(t *testing.T) {
	r := newRig(t, func(c *Config) { c.CursorMode = CursorAsync })
	oneBot(r, false)
	r.boot()
	rd := r.step(batch("s", "k", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	require.Len(t, rd.CursorWrites, 1)
	w := rd.CursorWrites[0]
	assert.False(t, w.Blind)
	assert.Equal(t, pos(1, 1), w.Cursor.Pos)
	assert.Equal(t, []byte("k"), w.Cursor.Token)
	assert.Len(t, r.messages("b"), 2, "the write is emitted only after the hand-off")
	_, ok := r.cursor("s")
	assert.False(t, ok, "async: the engine itself does not write")
	assert.Equal(t, 1, r.eng.Counters().CursorWrites, "only the membership's done marker at boot, written synchronously (joins.go)")

	// The runtime's write fails: it is emitted again after StoreRetry.
	r.step(CursorWriteDone{WriteID: w.WriteID, Err: errInjected})
	assert.Len(t, r.notesOf("store-error"), 1)
	r.advance(time.Second)
	require.Len(t, r.writes, 2)
	w2 := r.writes[1]
	assert.Equal(t, w.Cursor.Pos, w2.Cursor.Pos)
	assert.NotEqual(t, w.WriteID, w2.WriteID)

	_, err := r.mem.AdvanceCursors(t.Context(), []impl.Cursor{w2.Cursor})
	require.NoError(t, err)
	r.step(CursorWriteDone{WriteID: w2.WriteID})
	assert.Equal(t, 2, r.eng.Counters().CursorWrites)
	require.Len(t, r.notesOf("cursor"), 1)
	assert.Equal(t, pos(1, 1), r.notesOf("cursor")[0].Pos)
}

func TestRetroactiveMembershipReplaysStream(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, false)
	r.reg.Bots = append(r.reg.Bots, Bot{ID: "late"})
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 2, 0), logEvent("s", 3, 0)))

	// The registry says "late" joined after (1,0), which the engine has passed.
	rd := r.step(MembershipChanged{Membership: member("s", "late", pos(1, 0))})
	require.Len(t, rd.Subscribes, 1, "the stream is replayed from the membership start")
	assert.Equal(t, pos(1, 0), rd.Subscribes[0].From)
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 2, 0), logEvent("s", 3, 0), logEvent("s", 4, 0)))
	assert.Equal(t, []string{"s/2.0", "s/3.0", "s/4.0"}, r.eventIDs("late"))
	assert.Equal(t, []string{"s/1.0", "s/2.0", "s/3.0", "s/4.0"}, r.eventIDs("b"), "the replay duplicates nothing in the queue")
	c, _ := r.cursor("s")
	assert.Equal(t, pos(4, 0), c.Pos)
}

// Regression (simulator seed 195): a bot joining a stream that has members
// but no cursor yet must not anchor the cursor at its own start, past events
// that earlier members are owed and that are still in flight upstream; a
// crash then would lose them.
func TestJoinAnchorsAtEarliestMembership(t *testing.T) {
	r := newRig(t, nil)
	// a is a member from the registry at boot: the engine subscribes but
	// writes no cursor until it hands something off.
	r.reg = Registry{
		Bots:        []Bot{{ID: "a", HasKey: true}, {ID: "b", HasKey: true}},
		Memberships: []Membership{member("s", "a", pos(0, 0))},
	}
	r.boot()
	_, ok := r.cursor("s")
	require.False(t, ok)
	r.step(MembershipChanged{Membership: member("s", "b", pos(1, 0))})
	c, ok := r.cursor("s")
	require.True(t, ok)
	assert.Equal(t, pos(0, 0), c.Pos, "cursor must not pass events owed to a")

	// Crash before the in-flight event (1,0) arrives: the restart must
	// replay it to a.
	r.reg.Memberships = []Membership{member("s", "a", pos(0, 0)), member("s", "b", pos(1, 0))}
	rd := r.boot()
	require.Len(t, rd.Subscribes, 1)
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	assert.Equal(t, []string{"s/1.0", "s/1.1", "s/1.1"}, sortedStrings(sendIDs(r.takeSends())))
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

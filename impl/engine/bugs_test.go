package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReferenceKeepsMessageAcrossFailureButBugsLoseIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bugs     Bugs
		keptSent bool // still queued while the request is outstanding
		keptFail bool // still queued after the request failed
		dropped  int  // "dropped" notes
	}{
		{name: "reference", keptSent: true, keptFail: true},
		{name: "DeleteBeforeSend", bugs: Bugs{DeleteBeforeSend: true}},
		{name: "NoRequeueOnFailure", bugs: Bugs{NoRequeueOnFailure: true}, keptSent: true, dropped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.Bugs = tc.bugs })
			oneBot(r, true)
			r.boot()
			r.step(batch("s", "c", logEvent("s", 1, 0)))
			ss := r.takeSends()
			require.Len(t, ss, 1, "the bugs still send")
			assert.Equal(t, tc.keptSent, len(r.messages("b")) == 1)
			r.reply(ss[0], OutcomeStatus)
			assert.Equal(t, tc.keptFail, len(r.messages("b")) == 1)
			assert.Len(t, r.notesOf("dropped"), tc.dropped)
		})
	}
}

func TestUnguardedCursorWritesBugWritesBeforeHandOff(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Bugs.UnguardedCursorWrites = true })
	oneBot(r, false)
	r.boot()
	r.st.failNext["Enqueue"] = 1
	rd := r.step(batch("s", "k", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	require.Len(t, rd.CursorWrites, 1)
	assert.True(t, rd.CursorWrites[0].Blind)
	assert.Equal(t, pos(2, 0), rd.CursorWrites[0].Cursor.Pos)
	assert.Empty(t, r.messages("b"), "the cursor write went out although nothing was handed off")

	// The reference engine, in the same situation, writes nothing.
	ref := newRig(t, func(c *Config) { c.CursorMode = CursorAsync })
	oneBot(ref, false)
	ref.boot()
	ref.st.failNext["Enqueue"] = 1
	rd = ref.step(batch("s", "k", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	assert.Empty(t, rd.CursorWrites)
}

// Each known-bug variant must differ from the reference only in its own
// branch: it runs on the same hand-off (leased enqueue, direct, deferred
// acks) the reference picks for the same configuration and store. Only
// CursorBeforeDirectAnswer, a bug of the direct hand-off, forces that
// hand-off on. A variant that quietly took another path would be caught
// (or missed) for reasons that are not its bug.
func TestEveryVariantKeepsTheReferenceHandOff(t *testing.T) {
	configs := map[string]func(*Config){
		"queued":          func(c *Config) { c.HandOff = HandOffQueued },
		"queued-deferred": func(c *Config) { c.HandOff = HandOffQueued; c.AckDelay = 10 * time.Millisecond },
		"direct":          func(c *Config) { c.HandOff = HandOffDirect },
	}
	paths := func(e *Engine) [3]bool { return [3]bool{e.leaser != nil, e.direct, e.writer != nil} }
	fields := reflect.VisibleFields(reflect.TypeFor[Bugs]())
	require.NotEmpty(t, fields)
	for name, set := range configs {
		ref := newRig(t, set)
		ref.store = ref.mem // the flaky wrapper has no leased enqueue
		ref.boot()
		want := paths(ref.eng)
		require.True(t, want[0], "%s: the rig's store has a leased enqueue", name)
		for _, f := range fields {
			r := newRig(t, func(c *Config) {
				set(c)
				reflect.ValueOf(&c.Bugs).Elem().FieldByIndex(f.Index).SetBool(true)
			})
			r.store = r.mem
			r.boot()
			got, exp := paths(r.eng), want
			if f.Name == "CursorBeforeDirectAnswer" {
				exp = [3]bool{true, true, false}
			}
			assert.Equal(t, exp, got, "%s with Bugs.%s: hand-off (leased, direct, deferred) differs from the reference's", name, f.Name)
		}
	}
}

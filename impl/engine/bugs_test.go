package engine

import (
	"testing"

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

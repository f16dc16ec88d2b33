package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCrashAfterStoreWriteBeforeSend(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.crash[CrashAfterStoreWriteBeforeSend] = true
	err := r.stepErr(batch("s", "c", logEvent("s", 1, 0)))
	require.ErrorIs(t, err, ErrCrashed)
	assert.Empty(t, r.takeSends(), "a crash discards the step's effects")
	require.ErrorIs(t, r.eng.Step(KeyPublished{Bot: "b"}), ErrCrashed, "a crashed engine stays dead")

	r.expectLeasedThenResent("s/1.0")
}

func TestCrashAfterSendBeforeAck(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.crash[CrashAfterSendBeforeAck] = true
	require.ErrorIs(t, r.stepErr(WebhookResult{RequestID: ss[0].RequestID, Outcome: OutcomeOK}), ErrCrashed)
	assert.Len(t, r.messages("b"), 1, "delivered but not acked: still queued")

	r.boot()
	r.advance(30 * time.Second)
	again := r.takeSends()
	require.Len(t, again, 1, "at-least-once: the delivered message is sent again")
	assert.Equal(t, ss[0].EventID, again[0].EventID, "with the same webhook-id, so the receiver drops it")
	r.reply(again[0], OutcomeOK)
	assert.Empty(t, r.messages("b"))
}

func TestCrashAfterProcessBeforeCursor(t *testing.T) {
	r := newRig(t, nil)
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.crash[CrashAfterProcessBeforeCursor] = true
	require.ErrorIs(t, r.stepErr(batch("s", "c2", logEvent("s", 2, 0))), ErrCrashed)

	assert.Equal(t, []string{"s/1.0", "s/2.0"}, r.eventIDs("b"), "handed off before the crash")
	c, _ := r.cursor("s")
	assert.Equal(t, pos(1, 0), c.Pos, "the cursor was not advanced")

	rd := r.boot()
	assert.Equal(t, pos(1, 0), rd.Subscribes[0].From, "replay from the old cursor")
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	assert.Zero(t, r.eng.Counters().Enqueued, "the replayed event is already queued: enqueue is idempotent")
	assert.Equal(t, []string{"s/1.0", "s/2.0"}, r.eventIDs("b"))
	c, _ = r.cursor("s")
	assert.Equal(t, pos(2, 0), c.Pos)
}

func TestCrashHookAskedAtEveryPoint(t *testing.T) {
	seen := map[CrashPoint]int{}
	r := newRig(t, func(c *Config) {
		c.CrashHook = func(p CrashPoint) bool { seen[p]++; return false }
	})
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0)))
	for _, s := range r.takeSends() {
		r.reply(s, OutcomeOK)
	}
	assert.Equal(t, map[CrashPoint]int{
		CrashAfterStoreWriteBeforeSend: 1,
		CrashAfterSendBeforeAck:        1,
		CrashAfterProcessBeforeCursor:  1,
	}, seen)
}

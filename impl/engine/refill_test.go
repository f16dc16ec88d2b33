package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

// refillRig: bot "b" with four request slots, a 10 s webhook timeout and
// backoff, no jitter, and a 30 min lease and cleanup interval (so neither
// housekeeping nor a lapse comes soon), over the leasing store.
func refillRig(t *testing.T) (*rig, *leasing) {
	r, l := newDirectRig(t, func(c *Config) {
		c.MaxInFlightPerBot = 4
		c.WebhookTimeout = 10 * time.Second
		c.InitialBackoff = 10 * time.Second
		c.JitterFraction = 0
		c.Lease = 30 * time.Minute
		c.CleanupInterval = 30 * time.Minute
	})
	oneBot(r, true)
	return r, l
}

// A retry whose wake-up found every slot taken, behind requests that never
// answer: the result that frees a slot while more than half stay taken
// does not claim (refills come in batches), but wakes the bot a webhook
// timeout later, by when every request out at the result has had its
// timeout, although a wake-up for a lease lapse is already armed 30 min on
// (seed 9982; the scenario retry-behind-hung-requests-is-woken-after-a-
// result shows the same, but retry-backoff's wait grows by a lease when
// every slot is taken, so the scenario passes without the wake-up too).
func TestRefillWakesTheBotAWebhookTimeoutAfterAResult(t *testing.T) {
	r, l := refillRig(t)
	// s/1.0's leased insert commits but is reported ambiguous: its row
	// stays leased to this node, and the bot gets a wake-up at the lapse.
	r.store = &ambiguousLeasing{leasing: l, n: 1}
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	require.Empty(t, r.takeSends())
	r.advance(r.cfg.StoreRetry) // the retry finds the row present, leased
	require.Empty(t, r.takeSends())

	r.step(batch("s", "c2", logEvent("s", 2, 0), logEvent("s", 2, 1), logEvent("s", 2, 2), logEvent("s", 2, 3)))
	ss := r.takeSends()
	require.Len(t, ss, 4, "every slot taken")
	r.advance(time.Second)
	r.reply(ss[0], OutcomeStatus) // s/2.0: 503, due again 10 s later
	require.Empty(t, r.takeSends(), "no other row is due")
	r.advance(5 * time.Second)
	r.step(batch("s", "c3", logEvent("s", 3, 0))) // takes the free slot
	s5 := r.takeSends()
	require.Len(t, s5, 1)
	r.advance(5 * time.Second) // the retry is due: its wake-up finds no slot free
	require.Empty(t, r.takeSends())

	// s/2.1-2.3 never answer. s/3.0's answer frees a slot; three of four
	// stay taken.
	claims := l.claims
	r.reply(s5[0], OutcomeOK)
	assert.Empty(t, r.takeSends(), "more than half the slots still taken: no claim yet")
	assert.Equal(t, claims, l.claims, "no claim for a result that leaves more than half the slots taken")
	r.advance(r.cfg.WebhookTimeout - time.Millisecond)
	assert.Empty(t, r.takeSends())
	r.advance(time.Millisecond)
	ss = r.takeSends()
	require.Len(t, ss, 1, "the bot is woken a webhook timeout after the result, and its claim sends the retry")
	assert.Equal(t, "s/2.0", ss[0].EventID)
	assert.Equal(t, 2, ss[0].Attempt)
}

// With the leased hand-off, new messages reach a bot without a claim: a
// result of a bot with nothing known to be waiting in the queue makes no
// claim, which would come back empty.
func TestResultMakesNoClaimWhenNothingIsQueued(t *testing.T) {
	r, l := refillRig(t)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	require.Len(t, ss, 2, "sent on the leased hand-off")
	claims := l.claims
	for _, s := range ss {
		r.reply(s, OutcomeOK)
	}
	assert.Empty(t, r.messages("b"))
	assert.Equal(t, claims, l.claims, "no claim after results of a bot with no backlog")
	assert.Empty(t, r.takeSends())
}

// enqueueCounter counts the store's Enqueue and EnqueueLeased calls.
type enqueueCounter struct {
	*leasing
	calls int
}

func (c *enqueueCounter) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	c.calls++
	return c.leasing.Enqueue(ctx, msgs)
}

func (c *enqueueCounter) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	c.calls++
	return c.leasing.EnqueueLeased(ctx, msgs)
}

// A direct hand-off that sends every event with no row makes no enqueue
// call and notes nothing enqueued; a queued one notes what it inserted.
func TestHandOffEnqueuesAndNotesOnlyRows(t *testing.T) {
	r, l := newHandOffRig(t, nil)
	c := &enqueueCounter{leasing: l}
	r.store = c
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	require.Len(t, r.takeSends(), 2, "sent direct")
	assert.Empty(t, r.messages("b"), "no row")
	assert.Zero(t, c.calls, "nothing to enqueue: no store call")
	assert.Empty(t, r.notesOf("enqueued"), "nothing enqueued: no note")

	q := newRig(t, nil)
	oneBot(q, false) // no key yet: the events are queued
	q.boot()
	q.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ns := q.notesOf("enqueued")
	require.Len(t, ns, 1)
	assert.Equal(t, 2, ns[0].Count)
	assert.Equal(t, pos(1, 1), ns[0].Pos)
}

// A batch of results that answers a direct send 2xx frees its slot, and a
// bot with a retry waiting in the queue claims it in the same step once
// half its slots are free (the batch path settles a direct 2xx through its
// request slot, apart from the other results).
func TestBatchedDirectSuccessRefillsTheBot(t *testing.T) {
	r, _ := newDirectRig(t, func(c *Config) {
		c.HandOff = HandOffDirect
		c.MaxInFlightPerBot = 2
		c.InitialBackoff = 10 * time.Second
		c.JitterFraction = 0
		c.Lease = 30 * time.Minute
		c.CleanupInterval = 30 * time.Minute
	})
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	require.Len(t, ss, 2, "both slots taken")
	r.step(WebhookResults{Results: []WebhookResult{{RequestID: ss[0].RequestID, Outcome: OutcomeStatus, Status: 503}}})
	require.Empty(t, r.takeSends())
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	s3 := r.takeSends()
	require.Len(t, s3, 1, "the free slot taken again")
	r.advance(10 * time.Second) // s/1.0's retry is due: no slot free
	require.Empty(t, r.takeSends())

	r.step(WebhookResults{Results: []WebhookResult{{RequestID: s3[0].RequestID, Outcome: OutcomeOK}}})
	retry := r.takeSends()
	require.Len(t, retry, 1, "half the slots free: the result's step claims the waiting retry")
	assert.Equal(t, "s/1.0", retry[0].EventID)
	assert.Equal(t, 2, retry[0].Attempt)
}

// An answer for a request the engine does not hold (one it gave up, or
// never sent) is ignored, in a batch as alone.
func TestResultForAnUnknownRequestIsIgnored(t *testing.T) {
	r, _ := newDirectRig(t, func(c *Config) { c.HandOff = HandOffDirect })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	before := r.eng.Counters()
	unknown := ss[0].RequestID + 1000
	r.step(WebhookResults{Results: []WebhookResult{{RequestID: unknown, Outcome: OutcomeOK}, {RequestID: unknown + 1, Outcome: OutcomeStatus, Status: 400}}})
	r.step(WebhookResult{RequestID: unknown + 2, Outcome: OutcomeOK})
	assert.Equal(t, before, r.eng.Counters(), "nothing was settled")
	assert.Empty(t, r.takeSends())
	r.step(WebhookResults{Results: []WebhookResult{{RequestID: ss[0].RequestID, Outcome: OutcomeOK}}})
	assert.Equal(t, before.Delivered+1, r.eng.Counters().Delivered, "the real answer still settles its request")
}

package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

// ambiguousLeasing lets the next n leased enqueues commit and then report
// an ambiguous error, as a connection cut after COMMIT would.
type ambiguousLeasing struct {
	*leasing
	n int
}

func (a *ambiguousLeasing) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	ins, err := a.leasing.EnqueueLeased(ctx, msgs)
	if err == nil && a.n > 0 {
		a.n--
		return nil, fmt.Errorf("EnqueueLeased: lost commit acknowledgement: %w", impl.ErrAmbiguous)
	}
	return ins, err
}

func newHandOffRig(t *testing.T, mutate func(*Config)) (*rig, *leasing) {
	return newDirectRig(t, func(c *Config) {
		c.HandOff = HandOffDirect
		if mutate != nil {
			mutate(c)
		}
	})
}

func storedCursor(r *rig) impl.Position {
	c, _ := r.cursor("s")
	return c.Pos
}

func TestHandOffDirectWritesNoRowAndTheCursorWaitsForEveryAnswer(t *testing.T) {
	r, l := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	anchor := storedCursor(r)
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2)))
	ss := r.takeSends()
	require.Equal(t, []string{"s/1.0", "s/1.1", "s/1.2"}, sendIDs(ss))
	assert.Empty(t, r.messages("b"), "direct sends write no queue row")
	assert.Zero(t, l.claims)
	assert.Equal(t, anchor, storedCursor(r), "nothing answered yet: the cursor stays before the batch")

	r.reply(ss[2], OutcomeOK)
	r.reply(ss[0], OutcomeOK)
	assert.Equal(t, anchor, storedCursor(r), "s/1.1 is unanswered, so the cursor may not pass it")
	r.reply(ss[1], OutcomeOK)
	assert.Equal(t, pos(1, 2), storedCursor(r), "every answer is in")
	c := r.eng.Counters()
	assert.Equal(t, 3, c.SentDirect)
	assert.Equal(t, 3, c.Delivered)
	assert.Equal(t, 3, c.Acked)
	assert.Zero(t, c.Enqueued)
	assert.Empty(t, r.messages("b"))
}

func TestHandOffDirectOlderBatchHoldsTheCursor(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	anchor := storedCursor(r)
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 2)
	r.reply(ss[1], OutcomeOK)
	assert.Equal(t, anchor, storedCursor(r), "the newer batch is answered, the older is not")
	r.reply(ss[0], OutcomeOK)
	c, _ := r.cursor("s")
	assert.Equal(t, pos(2, 0), c.Pos, "both answered: the cursor goes to the newer batch")
	assert.Equal(t, []byte("c2"), c.Token, "with the newer batch's cookie")
}

func TestHandOffDirectBatchedResultsMoveTheCursorOnce(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	before := r.eng.Counters().CursorWrites
	r.step(WebhookResults{Results: []WebhookResult{{RequestID: ss[0].RequestID}, {RequestID: ss[1].RequestID}}})
	assert.Equal(t, 1, r.eng.Counters().CursorWrites-before)
	assert.Equal(t, pos(1, 1), storedCursor(r))
}

func TestHandOffDirectFailureIsQueuedAsAFailedAttempt(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeStatus)

	ms := r.messages("b")
	require.Len(t, ms, 1, "the failure wrote the row")
	m := ms[0]
	assert.Equal(t, 1, m.Attempts, "the direct attempt counts toward MaxAttempts")
	assert.Empty(t, m.LeaseOwner, "failed: the lease is released")
	wait := m.NextAttemptAt.Sub(t0)
	assert.GreaterOrEqual(t, wait, time.Second, "backoff after attempt 1")
	assert.Less(t, wait, 1300*time.Millisecond)
	assert.Equal(t, []byte("payload of s/1.0"), m.Payload)
	assert.Equal(t, pos(1, 0), storedCursor(r), "the row is durable, so the cursor may pass the event")

	r.advance(2 * time.Second)
	again := r.takeSends()
	require.Len(t, again, 1, "retried from the queue")
	assert.Equal(t, 2, again[0].Attempt)
	r.reply(again[0], OutcomeOK)
	assert.Empty(t, r.messages("b"))
}

func TestHandOffDirectLastAttemptFailingIsDeadLettered(t *testing.T) {
	r, _ := newHandOffRig(t, func(c *Config) { c.MaxAttempts = 1 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.reply(r.takeSends()[0], OutcomeRefused)
	ms := r.messages("b")
	require.Len(t, ms, 1)
	assert.True(t, ms[0].Dead)
	assert.Len(t, r.notesOf("dead"), 1)
}

func TestHandOffDirectCrashBeforeTheAnswerReplaysTheEvent(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	ss := r.takeSends()
	r.reply(ss[1], OutcomeOK) // s/2.0 answered, s/1.0 not: the crash takes it
	r.subs = nil
	r.boot()
	require.Len(t, r.subs, 1)
	assert.Negative(t, r.subs[0].From.Compare(pos(1, 0)), "the restarted engine resumes before the unanswered event")
	r.step(batch("s", "c2", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	assert.Equal(t, []string{"s/1.0", "s/2.0"}, sendIDs(r.takeSends()), "replayed (s/2.0 again: at-least-once)")
}

func TestHandOffDirectUnansweredSendIsQueuedAfterALease(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	require.Len(t, r.takeSends(), 1) // the answer never comes
	r.advance(r.cfg.CleanupInterval)
	ms := r.messages("b")
	require.Len(t, ms, 1, "the maintenance sweep wrote the row of the lost request")
	assert.Equal(t, 1, ms[0].Attempts)
	assert.Equal(t, pos(1, 0), storedCursor(r))
	again := r.takeSends()
	require.Len(t, again, 1, "and it is sent again from the queue")
	assert.Equal(t, 2, again[0].Attempt)
}

func TestHandOffDirectFailureRowWriteRetriedAfterStoreError(t *testing.T) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	anchor := storedCursor(r)
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.st.failNext["Enqueue"] = 1 // the shim's leased enqueue checks "Enqueue"
	r.reply(r.takeSends()[0], OutcomeTimeout)
	assert.Empty(t, r.messages("b"))
	assert.Equal(t, anchor, storedCursor(r), "the failed attempt is not durable yet")
	r.advance(r.cfg.StoreRetry)
	require.Len(t, r.messages("b"), 1)
	assert.Equal(t, 1, r.messages("b")[0].Attempts)
	assert.Equal(t, pos(1, 0), storedCursor(r))
}

func TestHandOffDirectGoesQueuedWhenTheBotCannotTakeIt(t *testing.T) {
	r, _ := newHandOffRig(t, func(c *Config) { c.MaxInFlightPerBot = 1 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	require.Equal(t, []string{"s/1.0"}, sendIDs(ss), "one slot: one direct send")
	assert.Equal(t, []string{"s/1.1"}, r.eventIDs("b"), "the other is queued")
	r.reply(ss[0], OutcomeOK)
	assert.Equal(t, pos(1, 1), storedCursor(r))
	assert.Equal(t, []string{"s/1.1"}, sendIDs(r.takeSends()), "then claimed and sent")
}

func TestHandOffDirectNeedsALeasingStore(t *testing.T) {
	r := newRig(t, func(c *Config) { c.HandOff = HandOffDirect })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	require.Len(t, r.takeSends(), 1)
	assert.Len(t, r.messages("b"), 1, "without impl.LeasingEnqueuer the engine hands off queued")
	assert.Zero(t, r.eng.Counters().SentDirect)
}

func TestCursorBeforeDirectAnswerBugMovesTheCursorAtSend(t *testing.T) {
	r, _ := newHandOffRig(t, func(c *Config) { c.HandOff = HandOffQueued; c.Bugs.CursorBeforeDirectAnswer = true })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	require.Len(t, r.takeSends(), 1)
	assert.Empty(t, r.messages("b"), "the bug hands off direct")
	assert.Equal(t, pos(1, 0), storedCursor(r), "and moves the cursor before the answer")
}

// Found by the simulator (seed 199, no-head-of-line-blocking): a leased
// enqueue that committed but was reported ambiguous left the rows leased to
// this node and sent by no one; the retry found them present, asked for a
// claim that could not take them yet, and nothing woke the bot until the
// maintenance sweep minutes later.
func TestAmbiguousLeasedEnqueueSendsWhenItsLeaseLapses(t *testing.T) {
	r, l := newDirectRig(t, nil)
	r.store = &ambiguousLeasing{leasing: l, n: 1}
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	assert.Empty(t, r.takeSends(), "the error looked like a failure")
	require.Len(t, r.messages("b"), 1, "but it committed, leased to us")
	r.advance(r.cfg.StoreRetry) // the retry finds the row present
	assert.Empty(t, r.takeSends())
	r.advance(r.cfg.Lease)
	ss := r.takeSends()
	require.Len(t, ss, 1, "sent once our own lease lapsed, not at the next maintenance sweep")
	assert.Less(t, r.clk.t.Sub(t0), r.cfg.CleanupInterval)
}

// A direct send answered a permanent status while this node's request for
// the message's row (another node's, written after this one booted, so
// its boot listing did not see it: a row listed at boot keeps a replay
// off the direct path) is still out: the direct send's failure cannot be recorded on the busy row, so
// the request's own failure, settled in the same batch, must dead-letter
// the row instead of scheduling a retry (seed 165571, bounded-retry: the
// 400 came first in the batch). Settled in the other order, the request's
// Fail would end the lease the direct send's record needs.
func TestHandOffDirectPermanentStatusBesideTheRowsRequestDeadLetters(t *testing.T) {
	t.Run("direct first", func(t *testing.T) { testPermanentBesideRow(t, true) })
	t.Run("row's request first", func(t *testing.T) { testPermanentBesideRow(t, false) })
}

func testPermanentBesideRow(t *testing.T, directFirst bool) {
	r, _ := newHandOffRig(t, nil)
	oneBot(r, true)
	r.boot()
	_, err := r.mem.Enqueue(t.Context(), []impl.Message{{Subscriber: "b", EventID: "s/1.0", Stream: "s", Pos: pos(1, 0),
		Payload: []byte("payload of s/1.0"), CreatedAt: t0, NextAttemptAt: t0}})
	require.NoError(t, err)
	r.step(KeyPublished{Bot: "b"}) // a pump: it claims the row
	claimed := r.takeSends()
	require.Len(t, claimed, 1, "the other node's row is claimed")
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	direct := r.takeSends()
	require.Len(t, direct, 1, "the arrival is sent direct beside it")
	require.Equal(t, claimed[0].EventID, direct[0].EventID)

	rs := []WebhookResult{
		{RequestID: direct[0].RequestID, Outcome: OutcomeStatus, Status: 400},
		{RequestID: claimed[0].RequestID, Outcome: OutcomeTimeout},
	}
	if !directFirst {
		rs[0], rs[1] = rs[1], rs[0]
	}
	r.step(WebhookResults{Results: rs})
	ms := r.messages("b")
	require.Len(t, ms, 1)
	assert.True(t, ms[0].Dead, "a 400 is never retried")
	assert.Len(t, r.notesOf("dead"), 1)
}

// onBatch reads a sorted batch where it lies and copies only to sort or
// drop: the caller's events are never written, whichever path a batch
// takes, and an unsorted or repeated batch is handed off as its sorted,
// deduplicated self.
func TestBatchEventsAreNeverWrittenAndAreHandedOffInOrder(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  func(*Config)
	}{{"queued", nil}, {"direct", func(c *Config) { c.HandOff = HandOffDirect }}} {
		t.Run(mode.name, func(t *testing.T) {
			r, _ := newDirectRig(t, mode.cfg)
			oneBot(r, true)
			r.boot()
			type given struct{ evs, was []Event }
			var all []given
			feed := func(evs ...Event) []string {
				t.Helper()
				all = append(all, given{evs: evs, was: slices.Clone(evs)})
				r.step(batch("s", "c", evs...))
				for _, g := range all {
					require.Equal(t, g.was, g.evs, "a batch the caller handed in was written")
				}
				ss := r.takeSends()
				for _, s := range ss {
					r.reply(s, OutcomeOK)
				}
				return sendIDs(ss)
			}
			// sorted, all new: read in place
			assert.Equal(t, []string{"s/1.0", "s/1.1"}, feed(logEvent("s", 1, 0), logEvent("s", 1, 1)))
			// unsorted: sorted in a copy
			assert.Equal(t, []string{"s/2.0", "s/2.1", "s/2.2"}, feed(logEvent("s", 2, 2), logEvent("s", 2, 0), logEvent("s", 2, 1)))
			// sorted, all new again, then sorted with a duplicate and an
			// event handed off before: the drop copies what was kept
			assert.Equal(t, []string{"s/3.0"}, feed(logEvent("s", 3, 0)))
			assert.Equal(t, []string{"s/4.0", "s/4.1"}, feed(logEvent("s", 4, 0), logEvent("s", 4, 0), logEvent("s", 4, 1)))
			assert.Equal(t, []string{"s/5.0"}, feed(logEvent("s", 3, 0), logEvent("s", 5, 0)))
			assert.Equal(t, []string{"s/6.0", "s/6.1"}, feed(logEvent("s", 6, 0), logEvent("s", 6, 1)))
			assert.Equal(t, []string{"s/7.0"}, feed(logEvent("s", 6, 1), logEvent("s", 7, 0)))
		})
	}
}

// A restart that replays an event whose message an earlier incarnation
// dead-lettered (its cursor was still held behind it by an older
// unanswered direct send) sends it no more: a dead letter takes no new
// attempts, across restarts (PROTOCOL.md, Attempts and dead letters).
// Direct hand-off once sent the replayed event again as a fresh attempt 1,
// which no row counted (chaos --plant no-backoff --handoff direct --seed
// 13: a ninth send of a doomed event after its dead letter, bounded-retry).
func TestHandOffDirectReplayOfADeadLetterIsNotSentAgain(t *testing.T) {
	r, _ := newHandOffRig(t, func(c *Config) { c.MaxAttempts = 2; c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	ss := r.takeSends()
	require.Equal(t, []string{"s/1.0", "s/2.0"}, sendIDs(ss))
	r.reply(ss[1], OutcomeStatus) // s/2.0 fails; s/1.0 stays unanswered, holding the cursor
	r.advance(2 * time.Second)
	retry := r.takeSends()
	require.Equal(t, []string{"s/2.0"}, sendIDs(retry))
	r.reply(retry[0], OutcomeStatus)
	var dead []string
	for _, m := range r.messages("b") {
		if m.Dead {
			dead = append(dead, m.EventID)
		}
	}
	require.Equal(t, []string{"s/2.0"}, dead, "two failures of two: dead-lettered")
	require.Negative(t, storedCursor(r).Compare(pos(2, 0)), "the unanswered s/1.0 holds the cursor behind the dead letter")

	r.boot() // the crash takes s/1.0's request; the upstream replays both
	r.advance(time.Second)
	r.takeSends()
	r.step(batch("s", "c2", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	r.advance(time.Minute)
	for _, s := range r.takeSends() {
		assert.NotEqual(t, "s/2.0", s.EventID, "the dead letter was sent again after the restart (attempt %d)", s.Attempt)
		r.reply(s, OutcomeOK)
	}
	ms := r.messages("b")
	require.Len(t, ms, 1)
	assert.True(t, ms[0].Dead, "still a dead letter")
	assert.Equal(t, 2, ms[0].Attempts)
}

// The same for a live row whose retry is not due yet: once a pump has
// found nothing due (and so cleared the bot's backlog), a replay of its
// event is no direct attempt 1 beside the row's count; the row's retry
// comes when due, as attempt 2.
func TestHandOffDirectReplayOfARowNotDueWaitsForIt(t *testing.T) {
	r, _ := newHandOffRig(t, func(c *Config) { c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	ss := r.takeSends()
	require.Equal(t, []string{"s/1.0", "s/2.0"}, sendIDs(ss))
	r.reply(ss[1], OutcomeStatus) // s/2.0's row: attempt 1, retry in a second; s/1.0 holds the cursor
	require.Len(t, r.messages("b"), 1)

	r.boot()
	r.step(KeyPublished{Bot: "b"}) // a pump that finds nothing due
	require.Empty(t, r.takeSends())
	r.step(batch("s", "c2", logEvent("s", 1, 0), logEvent("s", 2, 0)))
	assert.Equal(t, []string{"s/1.0"}, sendIDs(r.takeSends()), "the replayed s/2.0 has a row: only s/1.0 goes direct")
	r.advance(2 * time.Second)
	ss = r.takeSends()
	require.Equal(t, []string{"s/2.0"}, sendIDs(ss))
	assert.Equal(t, 2, ss[0].Attempt, "the row's own retry")
}

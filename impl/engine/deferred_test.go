package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

// handOffStore is the rig's leasing store with impl.HandOffWriter, done by
// memstore in one call; it records each call and fails the next
// failNext["HandOff"] of them.
type handOffStore struct {
	*leasing
	calls []impl.HandOffWrite
	other int // Ack and AdvanceCursors calls made outside WriteHandOff
}

func (h *handOffStore) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	// The engine reuses its buffers: keep copies.
	w.Ack, w.Enqueue, w.Cursors = append([]impl.MessageKey(nil), w.Ack...), append([]impl.Message(nil), w.Enqueue...), append([]impl.Cursor(nil), w.Cursors...)
	h.calls = append(h.calls, w)
	if err := h.check("HandOff"); err != nil {
		return impl.HandOffResult{}, err
	}
	return h.mem().WriteHandOff(ctx, w)
}

func (h *handOffStore) mem() impl.HandOffWriter {
	w, _ := impl.AsHandOffWriter(h.flaky.Store)
	return w
}

func (h *handOffStore) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	h.other++
	return h.leasing.Ack(ctx, keys)
}

func (h *handOffStore) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	h.other++
	return h.leasing.AdvanceCursors(ctx, cs)
}

func newAckDelayRig(t *testing.T) (*rig, *handOffStore) {
	r := newRig(t, func(c *Config) { c.AckDelay = time.Second })
	h := &handOffStore{leasing: &leasing{flaky: r.st}}
	r.store = h
	oneBot(r, true)
	r.boot()
	h.other = 0 // boot's cursor anchoring
	return r, h
}

func replyAll(r *rig, ss []Send) {
	rs := make([]WebhookResult, len(ss))
	for i, s := range ss {
		rs[i] = WebhookResult{RequestID: s.RequestID, Outcome: OutcomeOK, Status: 200}
	}
	r.step(WebhookResults{Results: rs})
}

// With AckDelay the acks of one batch and the cursor write wait for the
// next batch's leased insert and go with it in one store call; the timer
// writes the last ones. (Shown failing with writerOf returning nil: three
// calls per batch, none of them WriteHandOff.)
func TestAckDelayWritesAcksAndCursorWithTheNextInsert(t *testing.T) {
	r, h := newAckDelayRig(t)
	anchor := storedCursor(r)
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	require.Equal(t, []string{"s/1.0", "s/1.1"}, sendIDs(ss))
	assert.Equal(t, anchor, storedCursor(r), "the cursor write waits")
	replyAll(r, ss)
	assert.Len(t, r.messages("b"), 2, "the acks wait: the rows are still there")
	assert.Zero(t, r.eng.Counters().Acked, "an ack is counted once written")

	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	require.Len(t, h.calls, 1, "the first batch's insert had nothing to carry (a plain EnqueueLeased); the second carries its acks and cursor")
	w := h.calls[0]
	assert.Equal(t, []impl.MessageKey{{Subscriber: "b", EventID: "s/1.0"}, {Subscriber: "b", EventID: "s/1.1"}}, w.Ack)
	require.Len(t, w.Enqueue, 1)
	assert.Equal(t, "s/2.0", w.Enqueue[0].EventID)
	require.Len(t, w.Cursors, 1)
	assert.Equal(t, pos(1, 1), w.Cursors[0].Pos)
	assert.Equal(t, pos(1, 1), storedCursor(r))
	assert.Equal(t, []string{"s/2.0"}, r.eventIDs("b"))
	assert.Equal(t, 2, r.eng.Counters().Acked)
	assert.Len(t, r.notesOf("acked"), 2)

	ss = r.takeSends()
	replyAll(r, ss)
	r.advance(time.Second)
	require.Len(t, h.calls, 2, "the timer writes what no insert came for")
	assert.Empty(t, h.calls[1].Enqueue)
	assert.Equal(t, pos(2, 0), storedCursor(r))
	assert.Empty(t, r.messages("b"))
	assert.Equal(t, 3, r.eng.Counters().Acked)
	assert.Zero(t, h.other, "no Ack or AdvanceCursors of their own")
}

// A crash loses the deferred acks and cursor write: the rows stay, leased,
// and the upstream replays from the older cursor. Duplicates, no loss.
func TestAckDelayCrashLosesOnlyAcks(t *testing.T) {
	r, _ := newAckDelayRig(t)
	anchor := storedCursor(r)
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	replyAll(r, r.takeSends())
	r.subs = nil
	r.boot()
	assert.Equal(t, []string{"s/1.0"}, r.eventIDs("b"), "the delivered message is still queued")
	assert.Equal(t, anchor, storedCursor(r))
	require.NotEmpty(t, r.subs)
	assert.Equal(t, anchor, r.subs[0].From, "the upstream replays the batch")
	r.advance(31 * time.Second)
	assert.Equal(t, []string{"s/1.0"}, sendIDs(r.takeSends()), "sent again once its lease lapsed")
}

// A failed hand-off write leaves its acks and cursor to the store-retry
// timer, like failed Ack and AdvanceCursors calls, and the batch's insert
// to the stream's retry. (Shown failing with the acks not put back as
// pending ops: the rows stay.)
func TestAckDelayFailedWriteIsRetried(t *testing.T) {
	r, h := newAckDelayRig(t)
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	replyAll(r, r.takeSends())
	h.failNext["HandOff"] = 1
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	assert.Len(t, r.notesOf("store-error"), 1)
	assert.Equal(t, []string{"s/1.0"}, r.eventIDs("b"))
	r.advance(time.Second)
	replyAll(r, r.takeSends())
	r.advance(time.Second)
	assert.Empty(t, r.messages("b"), "both messages acked in the end")
	assert.Equal(t, pos(2, 0), storedCursor(r))
	assert.Equal(t, 2, r.eng.Counters().Acked)
}

func TestAckDelayIsBounded(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 28 * time.Second} {
		cfg := DefaultConfig()
		cfg.Node, cfg.Clock = "n", &fakeClock{t: t0}
		cfg.AckDelay = d
		require.Error(t, cfg.Validate(), "AckDelay %v", d)
	}
}

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// StoreCalls counts the engine's store calls during the timed replay, and
// the seconds spent in them: for Postgres each call is one round trip and
// one transaction, so this says whether round trips or row work dominate.
type StoreCalls struct {
	ListCursors    int `json:"list_cursors"`
	AdvanceCursors int `json:"advance_cursors"`
	Enqueue        int `json:"enqueue"`
	Claim          int `json:"claim"`
	Ack            int `json:"ack"`
	Other          int `json:"other"`
	// HandOff counts impl.HandOffWriter calls; each is also counted under
	// each of its parts above (enqueue, ack, advance_cursors), and its
	// time under the first of enqueue, ack, cursors it carries.
	HandOff int `json:"hand_off"`

	AdvanceCursorsSeconds float64 `json:"advance_cursors_seconds"`
	EnqueueSeconds        float64 `json:"enqueue_seconds"`
	ClaimSeconds          float64 `json:"claim_seconds"`
	AckSeconds            float64 `json:"ack_seconds"`
}

// counting wraps a store and counts calls; the engine is single-threaded
// so plain ints do. Reading the clock twice per call is noise next to a
// call, which handles a whole batch.
type counting struct {
	impl.Store
	n StoreCalls
}

// timed counts one call in n; its stop (deferred) adds the call's duration
// to secs. A value, not a closure, so counting allocates nothing.
func timed(n *int, secs *float64) callTimer {
	*n++
	return callTimer{secs: secs, start: time.Now()}
}

type callTimer struct {
	secs  *float64
	start time.Time
}

func (t callTimer) stop() { *t.secs += time.Since(t.start).Seconds() }

func (c *counting) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	c.n.ListCursors++
	return c.Store.ListCursors(ctx)
}

func (c *counting) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	defer timed(&c.n.AdvanceCursors, &c.n.AdvanceCursorsSeconds).stop()
	return c.Store.AdvanceCursors(ctx, cs)
}

func (c *counting) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	defer timed(&c.n.Enqueue, &c.n.EnqueueSeconds).stop()
	return c.Store.Enqueue(ctx, msgs)
}

func (c *counting) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	defer timed(&c.n.Claim, &c.n.ClaimSeconds).stop()
	return c.Store.Claim(ctx, req)
}

func (c *counting) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	defer timed(&c.n.Ack, &c.n.AckSeconds).stop()
	return c.Store.Ack(ctx, keys)
}

func (c *counting) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	c.n.Other++
	return c.Store.Fail(ctx, req)
}

func (c *counting) ListMessages(ctx context.Context, sub string) ([]impl.Message, error) {
	c.n.Other++
	return c.Store.ListMessages(ctx, sub)
}

func (c *counting) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	c.n.Other++
	return c.Store.DeleteExpired(ctx, cutoff, now)
}

func (c *counting) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	c.n.Other++
	return c.Store.TrimPerSubscriber(ctx, max, now)
}

// Close is the owner's job, not the engine's.
func (c *counting) Close() error { return nil }

// Unwrap returns the counted store (impl.Wrapper): the engine finds the
// leased enqueue through counting only when the counted store has it.
func (c *counting) Unwrap() impl.Store { return c.Store }

// EnqueueLeased counts a leased enqueue as an Enqueue.
func (c *counting) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	defer timed(&c.n.Enqueue, &c.n.EnqueueSeconds).stop()
	le, ok := impl.AsLeasingEnqueuer(c.Store)
	if !ok {
		return nil, fmt.Errorf("bench: the %T store has no leased enqueue", c.Store)
	}
	return le.EnqueueLeased(ctx, msgs)
}

// WriteHandOff counts a hand-off write under each of its non-empty parts
// (an enqueue, an ack, a cursor write) and its time under the first of
// them, so the calls still add up to the batches.
func (c *counting) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	hw, ok := impl.AsHandOffWriter(c.Store)
	if !ok {
		return impl.HandOffResult{}, fmt.Errorf("bench: the %T store has no hand-off write", c.Store)
	}
	c.n.HandOff++
	if len(w.Ack) > 0 {
		c.n.Ack++
	}
	if len(w.Cursors) > 0 {
		c.n.AdvanceCursors++
	}
	switch {
	case len(w.Enqueue) > 0:
		defer timed(&c.n.Enqueue, &c.n.EnqueueSeconds).stop()
	case len(w.Ack) > 0:
		defer timed(new(int), &c.n.AckSeconds).stop()
	default:
		defer timed(new(int), &c.n.AdvanceCursorsSeconds).stop()
	}
	return hw.WriteHandOff(ctx, w)
}

// wrapCounting returns the counting wrapper and the store to give the
// engine.
func wrapCounting(store impl.Store) (*counting, impl.Store) {
	c := &counting{Store: store}
	return c, c
}

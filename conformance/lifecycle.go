package conformance

import (
	"context"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
)

// The lifecycle rules of impl.Store that every caller leans on: a call
// whose context is already done returns an error and takes no effect (the
// engine cancels a node's context when it stops, and a write that landed
// anyway would be one the node never learns about), and a closed store
// refuses every call instead of acting on state it has released.

// storeCalls is one call of every Store method (and of the optional
// capabilities the store has), each of which would change the state of the
// store built by lifecycleSetup if it took effect.
func storeCalls(st impl.Store) map[string]func(ctx context.Context) error {
	calls := map[string]func(ctx context.Context) error{
		"GetCursor": func(ctx context.Context) error {
			_, _, err := st.GetCursor(ctx, impl.CursorKey{Stream: "s1"})
			return err
		},
		"ListCursors": func(ctx context.Context) error { _, err := st.ListCursors(ctx); return err },
		"AdvanceCursors": func(ctx context.Context) error {
			_, err := st.AdvanceCursors(ctx, []impl.Cursor{cursor("s1", "", 9, 0, "", "tok-late", at(sec))})
			return err
		},
		"Enqueue": func(ctx context.Context) error {
			_, err := st.Enqueue(ctx, []impl.Message{msg("b1", "late", at(sec))})
			return err
		},
		"Claim": func(ctx context.Context) error {
			_, err := st.Claim(ctx, impl.ClaimRequest{Subscriber: "b1", Owner: "n9", Now: at(sec), Lease: sec, Limit: 10})
			return err
		},
		"Ack": func(ctx context.Context) error { _, err := st.Ack(ctx, []impl.MessageKey{key("b1", "e1")}); return err },
		"Fail": func(ctx context.Context) error {
			_, _, err := st.Fail(ctx, impl.FailRequest{Key: key("b1", "e2"), Owner: "n1", NextAttempt: at(sec), MaxAttempts: 1, Reason: "late"})
			return err
		},
		"Requeue": func(ctx context.Context) error {
			_, err := st.Requeue(ctx, key("b1", "dead"), at(sec))
			return err
		},
		"ListMessages": func(ctx context.Context) error { _, err := st.ListMessages(ctx, ""); return err },
		"DeleteExpired": func(ctx context.Context) error {
			_, err := st.DeleteExpired(ctx, at(100*sec), at(100*sec))
			return err
		},
		"TrimPerSubscriber": func(ctx context.Context) error {
			_, err := st.TrimPerSubscriber(ctx, 1, at(100*sec))
			return err
		},
		"GetDelivered": func(ctx context.Context) error { _, err := st.GetDelivered(ctx, "app", "src"); return err },
		"RecordDelivered": func(ctx context.Context) error {
			return st.RecordDelivered(ctx, "app", "src", []impl.DeliveredItem{{ID: "f2", Version: "v9"}}, []string{"f1"})
		},
		"MarkProcessed": func(ctx context.Context) error {
			_, err := st.MarkProcessed(ctx, impl.MarkRequest{Subscriber: "b1", EventID: "fresh", Now: at(sec), Window: 10 * sec})
			return err
		},
	}
	if b, ok := st.(impl.BlindCursorWriter); ok {
		calls["PutCursorBlind"] = func(ctx context.Context) error {
			return b.PutCursorBlind(ctx, cursor("s1", "", 0, 1, "", "tok-blind", at(sec)))
		}
	}
	if l, ok := st.(impl.LeasingEnqueuer); ok {
		calls["EnqueueLeased"] = func(ctx context.Context) error {
			m := msg("b2", "late-leased", at(sec))
			m.LeaseOwner, m.LeaseUntil = "n1", at(10*sec)
			_, err := l.EnqueueLeased(ctx, []impl.Message{m})
			return err
		}
	}
	if h, ok := impl.AsHandOffWriter(st); ok {
		// Every part at once, so that a backend which checks the store's
		// state only on some paths (the ack, the insert, the cursors) still
		// has to refuse the whole call.
		calls["WriteHandOff"] = func(ctx context.Context) error {
			m := msg("b2", "late-handoff", at(sec))
			m.LeaseOwner, m.LeaseUntil = "n1", at(10*sec)
			_, err := h.WriteHandOff(ctx, impl.HandOffWrite{
				Ack:     []impl.MessageKey{key("b1", "e1")},
				Enqueue: []impl.Message{m},
				Cursors: []impl.Cursor{cursor("s1", "", 9, 1, "", "tok-handoff", at(sec))},
			})
			return err
		}
	}
	return calls
}

// lifecycleSetup gives the store a cursor, live, leased and dead messages,
// delivered state and a dedup entry, so that every call in storeCalls has
// something to change.
func lifecycleSetup(t testing.TB, c client) {
	eq(t, []bool{true}, c.advance(cursor("s1", "", 5, 0, "", "tok", at(0))), "AdvanceCursors writes a cursor whose Pos is greater than the stored one's (or none is stored)")
	eq(t, 3, c.enqueue(msg("b1", "dead", at(0)), msg("b1", "e1", at(0)), msg("b1", "e2", at(0))), "Enqueue inserts each new (Subscriber, EventID) once")
	length(t, c.claim("b1", "n1", at(0), 5*sec, 1), 1, "Claim leases the due messages, up to Limit") // dead
	_, ok := c.fail(key("b1", "dead"), "n1", at(0), 1, "poison")
	isTrue(t, ok, "Fail by the lease holder records the attempt and returns true")
	length(t, c.claim("b1", "n1", at(0), 5*sec, 2), 2, "Claim leases the due messages, up to Limit") // e1, e2 leased by n1
	noErr(t, c.st.RecordDelivered(c.ctx, "app", "src", []impl.DeliveredItem{{ID: "f1", Version: "v1"}}, nil), "RecordDelivered")
}

type lifecycleState struct {
	Cursors   []impl.Cursor
	Messages  []impl.Message
	Delivered []impl.DeliveredItem
}

func lifecycleRead(t testing.TB, c client) lifecycleState {
	d, err := c.st.GetDelivered(c.ctx, "app", "src")
	noErr(t, err, "GetDelivered")
	return lifecycleState{Cursors: c.cursors(), Messages: c.list(""), Delivered: d}
}

func sortedNames(calls map[string]func(context.Context) error) []string {
	var names []string
	for n := range calls {
		names = append(names, n)
	}
	for i := 1; i < len(names); i++ { // a handful of names: insertion sort
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	return names
}

// checkCancelledContext: every method called with a context that is
// already cancelled returns an error, and none of them changed the store.
func checkCancelledContext(t testing.TB, c client) {
	lifecycleSetup(t, c)
	before := lifecycleRead(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := storeCalls(c.st)
	for _, name := range sortedNames(calls) {
		isErr(t, calls[name](ctx), "%s with a cancelled context must return an error", name)
	}
	eq(t, before, lifecycleRead(t, c), "calls with a cancelled context changed the store")
	isTrue(t, c.mark("b1", "fresh", at(2*sec), 10*sec),
		"MarkProcessed with a cancelled context recorded the event: a later first sight reports it as a duplicate")
}

// checkClosed: after Close every method returns an error.
func checkClosed(t testing.TB, c client) {
	lifecycleSetup(t, c)
	noErr(t, c.st.Close(), "Close")
	calls := storeCalls(c.st)
	for _, name := range sortedNames(calls) {
		isErr(t, calls[name](context.Background()), "%s on a closed store must return an error", name)
	}
}

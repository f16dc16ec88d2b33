package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
)

// schedStore injects the scheduled store faults of one node in front of
// its random-fault wrapper: store-error fails a call before it reaches the
// store, store-ambiguous lets a write commit and then reports an error
// wrapping impl.ErrAmbiguous.
type schedStore struct {
	s       *sim
	n       *node
	inner   *faults.Store
	onFault func(faults.Kind, string)
}

var (
	_ impl.Store             = (*schedStore)(nil)
	_ impl.BlindCursorWriter = (*schedStore)(nil)
	_ impl.LeasingEnqueuer   = (*schedStore)(nil)
	_ impl.Wrapper           = (*schedStore)(nil)
)

// Unwrap returns the wrapped store (impl.Wrapper).
func (st *schedStore) Unwrap() impl.Store { return st.inner }

func (st *schedStore) hit(k faults.Kind, method string) bool {
	if len(st.s.sched.faults) == 0 {
		return false
	}
	_, ok := st.s.schedTake(func(f Fault) bool {
		return f.Kind == k && f.Node == st.n.name && f.Method == method && st.s.reached(f, st.n.ord)
	})
	if ok {
		st.onFault(k, method)
	}
	return ok
}

// before numbers the call within its instant (see node.ordinal) and fails
// it if the schedule says so.
func (st *schedStore) before(method string) error {
	st.n.ord = st.n.ordinal("call:" + method)
	if st.hit(faults.StoreError, method) {
		return fmt.Errorf("%s: %w", method, faults.ErrInjected)
	}
	return nil
}

func (st *schedStore) after(method string, err error) error {
	if err == nil && st.hit(faults.StoreAmbiguous, method) {
		return fmt.Errorf("%s: injected lost commit acknowledgement: %w", method, impl.ErrAmbiguous)
	}
	return err
}

func (st *schedStore) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	if err := st.before("GetCursor"); err != nil {
		return impl.Cursor{}, false, err
	}
	return st.inner.GetCursor(ctx, key)
}

func (st *schedStore) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	if err := st.before("ListCursors"); err != nil {
		return nil, err
	}
	return st.inner.ListCursors(ctx)
}

func (st *schedStore) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	const m = "AdvanceCursors"
	if err := st.before(m); err != nil {
		return nil, err
	}
	ok, err := st.inner.AdvanceCursors(ctx, cs)
	if err = st.after(m, err); err != nil {
		return nil, err
	}
	return ok, nil
}

func (st *schedStore) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	const m = "PutCursorBlind"
	if err := st.before(m); err != nil {
		return err
	}
	return st.after(m, st.inner.PutCursorBlind(ctx, c))
}

func (st *schedStore) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	const m = "Enqueue"
	if err := st.before(m); err != nil {
		return 0, err
	}
	n, err := st.inner.Enqueue(ctx, msgs)
	if err = st.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (st *schedStore) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	const m = "EnqueueLeased"
	if err := st.before(m); err != nil {
		return nil, err
	}
	ins, err := st.inner.EnqueueLeased(ctx, msgs)
	if err = st.after(m, err); err != nil {
		return nil, err
	}
	return ins, nil
}

func (st *schedStore) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	const m = "Claim"
	if err := st.before(m); err != nil {
		return nil, err
	}
	msgs, err := st.inner.Claim(ctx, req)
	if err = st.after(m, err); err != nil {
		return nil, err
	}
	return msgs, nil
}

func (st *schedStore) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	const m = "Ack"
	if err := st.before(m); err != nil {
		return 0, err
	}
	n, err := st.inner.Ack(ctx, keys)
	if err = st.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (st *schedStore) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	const m = "Fail"
	if err := st.before(m); err != nil {
		return impl.Message{}, false, err
	}
	msg, ok, err := st.inner.Fail(ctx, req)
	if err = st.after(m, err); err != nil {
		return impl.Message{}, false, err
	}
	return msg, ok, nil
}

func (st *schedStore) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	const m = "Requeue"
	if err := st.before(m); err != nil {
		return false, err
	}
	ok, err := st.inner.Requeue(ctx, key, now)
	if err = st.after(m, err); err != nil {
		return false, err
	}
	return ok, nil
}

func (st *schedStore) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	if err := st.before("ListMessages"); err != nil {
		return nil, err
	}
	return st.inner.ListMessages(ctx, subscriber)
}

func (st *schedStore) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	const m = "DeleteExpired"
	if err := st.before(m); err != nil {
		return 0, err
	}
	n, err := st.inner.DeleteExpired(ctx, cutoff, now)
	if err = st.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (st *schedStore) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	const m = "TrimPerSubscriber"
	if err := st.before(m); err != nil {
		return 0, err
	}
	n, err := st.inner.TrimPerSubscriber(ctx, max, now)
	if err = st.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (st *schedStore) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := st.before("GetDelivered"); err != nil {
		return nil, err
	}
	return st.inner.GetDelivered(ctx, app, source)
}

func (st *schedStore) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	const m = "RecordDelivered"
	if err := st.before(m); err != nil {
		return err
	}
	return st.after(m, st.inner.RecordDelivered(ctx, app, source, items, deleted))
}

func (st *schedStore) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	const m = "MarkProcessed"
	if err := st.before(m); err != nil {
		return false, err
	}
	fresh, err := st.inner.MarkProcessed(ctx, req)
	if err = st.after(m, err); err != nil {
		return false, err
	}
	return fresh, nil
}

// Close is a no-op: the simulator owns the shared store.
func (st *schedStore) Close() error { return nil }

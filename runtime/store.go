package runtime

import (
	"context"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// timedStore bounds every store call: the engine calls the store
// synchronously on the one goroutine that owns it, with a context that
// never ends, so a database connection that stalls (a half-open TCP
// connection, a frozen server) would otherwise freeze the whole engine.
// A call that runs out of time fails like any store error; the engine
// counts it and retries on its store-retry timer. Errors are counted for
// /metrics.
//
// With held set (Options.RetentionHeldOnly), retention touches only the
// messages of the bots it lists, those without a published key (seed 000:
// enqueued messages wait for a bot's key; seed 003 ages and caps them):
// the inner store must then scope retention (scopedRetention).
type timedStore struct {
	inner   impl.Store
	timeout time.Duration
	onErr   func(method string)
	held    func() []string
	// keepOldest: the RetentionKeepsOldest plant (held retention only).
	keepOldest bool
}

// oldestKeeper is a store that can trim the wrong end of a held backlog
// (pgstore), for the RetentionKeepsOldest plant.
type oldestKeeper interface {
	TrimKeepingOldestOf(ctx context.Context, subs []string, limit int, now time.Time) (int, error)
}

// scopedRetention is a store whose retention calls can be limited to some
// subscribers (pgstore).
type scopedRetention interface {
	DeleteExpiredOf(ctx context.Context, subs []string, cutoff, now time.Time) (int, error)
	TrimPerSubscriberOf(ctx context.Context, subs []string, limit int, now time.Time) (int, error)
}

func (s *timedStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

func (s *timedStore) count(method string, err error) {
	if err != nil && s.onErr != nil {
		s.onErr(method)
	}
}

func (s *timedStore) GetCursor(_ context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	c, ok, err := s.inner.GetCursor(ctx, key)
	s.count("GetCursor", err)
	return c, ok, err
}

func (s *timedStore) ListCursors(_ context.Context) ([]impl.Cursor, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	cs, err := s.inner.ListCursors(ctx)
	s.count("ListCursors", err)
	return cs, err
}

func (s *timedStore) AdvanceCursors(_ context.Context, cs []impl.Cursor) ([]bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	ok, err := s.inner.AdvanceCursors(ctx, cs)
	s.count("AdvanceCursors", err)
	return ok, err
}

func (s *timedStore) Enqueue(_ context.Context, msgs []impl.Message) (int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	n, err := s.inner.Enqueue(ctx, msgs)
	s.count("Enqueue", err)
	return n, err
}

func (s *timedStore) Claim(_ context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	m, err := s.inner.Claim(ctx, req)
	s.count("Claim", err)
	return m, err
}

func (s *timedStore) Ack(_ context.Context, keys []impl.MessageKey) (int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	n, err := s.inner.Ack(ctx, keys)
	s.count("Ack", err)
	return n, err
}

func (s *timedStore) Fail(_ context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	m, ok, err := s.inner.Fail(ctx, req)
	s.count("Fail", err)
	return m, ok, err
}

func (s *timedStore) Requeue(_ context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	ok, err := s.inner.Requeue(ctx, key, now)
	s.count("Requeue", err)
	return ok, err
}

func (s *timedStore) ListMessages(_ context.Context, sub string) ([]impl.Message, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	m, err := s.inner.ListMessages(ctx, sub)
	s.count("ListMessages", err)
	return m, err
}

func (s *timedStore) DeleteExpired(_ context.Context, cutoff, now time.Time) (int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var n int
	var err error
	if s.held != nil {
		n, err = s.inner.(scopedRetention).DeleteExpiredOf(ctx, s.held(), cutoff, now)
	} else {
		n, err = s.inner.DeleteExpired(ctx, cutoff, now)
	}
	s.count("DeleteExpired", err)
	return n, err
}

func (s *timedStore) TrimPerSubscriber(_ context.Context, max int, now time.Time) (int, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var n int
	var err error
	k, keepOldest := s.inner.(oldestKeeper)
	switch {
	case s.held != nil && s.keepOldest && keepOldest:
		n, err = k.TrimKeepingOldestOf(ctx, s.held(), max, now)
	case s.held != nil:
		n, err = s.inner.(scopedRetention).TrimPerSubscriberOf(ctx, s.held(), max, now)
	default:
		n, err = s.inner.TrimPerSubscriber(ctx, max, now)
	}
	s.count("TrimPerSubscriber", err)
	return n, err
}

func (s *timedStore) GetDelivered(_ context.Context, app, source string) ([]impl.DeliveredItem, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	d, err := s.inner.GetDelivered(ctx, app, source)
	s.count("GetDelivered", err)
	return d, err
}

func (s *timedStore) RecordDelivered(_ context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	err := s.inner.RecordDelivered(ctx, app, source, items, deleted)
	s.count("RecordDelivered", err)
	return err
}

func (s *timedStore) MarkProcessed(_ context.Context, req impl.MarkRequest) (bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	ok, err := s.inner.MarkProcessed(ctx, req)
	s.count("MarkProcessed", err)
	return ok, err
}

// Close does not close the inner store: whoever opened it closes it.
func (s *timedStore) Close() error { return nil }

// Unwrap returns the bounded store (impl.Wrapper): impl.AsLeasingEnqueuer
// and impl.AsBlindCursorWriter find a capability through timedStore only
// when the inner store has it, so the engine sees exactly the inner set.
func (s *timedStore) Unwrap() impl.Store { return s.inner }

func (s *timedStore) EnqueueLeased(_ context.Context, msgs []impl.Message) ([]bool, error) {
	le, ok := impl.AsLeasingEnqueuer(s.inner)
	if !ok {
		return nil, errNoLeased
	}
	ctx, cancel := s.ctx()
	defer cancel()
	ok2, err := le.EnqueueLeased(ctx, msgs)
	s.count("EnqueueLeased", err)
	return ok2, err
}

func (s *timedStore) PutCursorBlind(_ context.Context, c impl.Cursor) error {
	ctx, cancel := s.ctx()
	defer cancel()
	bw, ok := impl.AsBlindCursorWriter(s.inner)
	if !ok {
		return errNoBlind
	}
	err := bw.PutCursorBlind(ctx, c)
	s.count("PutCursorBlind", err)
	return err
}

func (s *timedStore) WriteHandOff(_ context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	hw, ok := impl.AsHandOffWriter(s.inner)
	if !ok {
		return impl.HandOffResult{}, errNoHandOff
	}
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := hw.WriteHandOff(ctx, w)
	s.count("WriteHandOff", err)
	return res, err
}

// wrapStore bounds inner's calls, keeping exactly its optional
// capabilities; a non-nil held limits retention to the bots it lists
// (inner must be a scopedRetention).
func wrapStore(inner impl.Store, timeout time.Duration, onErr func(string), held func() []string) *timedStore {
	return &timedStore{inner: inner, timeout: timeout, onErr: onErr, held: held}
}

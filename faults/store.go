package faults

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// ErrInjected is the error of a store call that failed before taking effect.
var ErrInjected = errors.New("faults: injected store error (nothing was written)")

// Injector decides, call by call, which store calls fail. A Store asks it
// Before every call and, for a write that succeeded, After it.
type Injector interface {
	// Before returns the fault that fails the call before it reaches the
	// store (StoreError), if any.
	Before(method string) (Kind, bool)
	// After returns the fault that turns a committed write into an
	// ambiguous error (StoreAmbiguous), if any.
	After(method string) (Kind, bool)
}

// Store wraps an impl.Store and fails its calls as its Injector decides: a
// fault Before the call fails it without reaching the inner store (nothing
// is written); a fault After a write that succeeded returns an error
// wrapping impl.ErrAmbiguous (the write committed; the caller cannot tell).
// Reads are only ever failed before. Close is never failed, and does not
// close the inner store (whoever opened it closes it).
//
// A Store is not safe for concurrent use: the simulator is single-threaded,
// and the order of the Injector's decisions is part of the deterministic
// schedule.
type Store struct {
	inner impl.Store
	inj   Injector
}

var (
	_ impl.Store             = (*Store)(nil)
	_ impl.BlindCursorWriter = (*Store)(nil)
	_ impl.LeasingEnqueuer   = (*Store)(nil)
	_ impl.HandOffWriter     = (*Store)(nil)
	_ impl.Wrapper           = (*Store)(nil)
)

// NewStore wraps inner; inj decides the faults.
func NewStore(inner impl.Store, inj Injector) *Store {
	return &Store{inner: inner, inj: inj}
}

// Unwrap returns the wrapped store (impl.Wrapper).
func (s *Store) Unwrap() impl.Store { return s.inner }

// before decides whether a call fails without reaching the inner store.
func (s *Store) before(method string) error {
	if _, ok := s.inj.Before(method); ok {
		return fmt.Errorf("%s: %w", method, ErrInjected)
	}
	return nil
}

// after decides, for a write that succeeded, whether the caller sees an
// ambiguous error instead.
func (s *Store) after(method string, err error) error {
	if err != nil {
		return err
	}
	if _, ok := s.inj.After(method); ok {
		return fmt.Errorf("%s: injected lost commit acknowledgement: %w", method, impl.ErrAmbiguous)
	}
	return nil
}

func (s *Store) GetCursor(ctx context.Context, key impl.CursorKey) (impl.Cursor, bool, error) {
	if err := s.before("GetCursor"); err != nil {
		return impl.Cursor{}, false, err
	}
	return s.inner.GetCursor(ctx, key)
}

func (s *Store) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	if err := s.before("ListCursors"); err != nil {
		return nil, err
	}
	return s.inner.ListCursors(ctx)
}

func (s *Store) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	const m = "AdvanceCursors"
	if err := s.before(m); err != nil {
		return nil, err
	}
	ok, err := s.inner.AdvanceCursors(ctx, cs)
	if err = s.after(m, err); err != nil {
		return nil, err
	}
	return ok, nil
}

// PutCursorBlind forwards the buggy unguarded write when the inner store
// offers it.
func (s *Store) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	const m = "PutCursorBlind"
	bw, ok := impl.AsBlindCursorWriter(s.inner)
	if !ok {
		return fmt.Errorf("%s: the wrapped store %T does not implement impl.BlindCursorWriter", m, s.inner)
	}
	if err := s.before(m); err != nil {
		return err
	}
	return s.after(m, bw.PutCursorBlind(ctx, c))
}

func (s *Store) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	const m = "Enqueue"
	if err := s.before(m); err != nil {
		return 0, err
	}
	n, err := s.inner.Enqueue(ctx, msgs)
	if err = s.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

// EnqueueLeased forwards impl.LeasingEnqueuer (discoverable through
// impl.AsLeasingEnqueuer only when the wrapped store has it); it fails like
// any other write.
func (s *Store) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	const m = "EnqueueLeased"
	le, ok := impl.AsLeasingEnqueuer(s.inner)
	if !ok {
		return nil, fmt.Errorf("%s: the wrapped %T has no leased enqueue", m, s.inner)
	}
	if err := s.before(m); err != nil {
		return nil, err
	}
	ins, err := le.EnqueueLeased(ctx, msgs)
	if err = s.after(m, err); err != nil {
		return nil, err
	}
	return ins, nil
}

// WriteHandOff forwards impl.HandOffWriter (discoverable through
// impl.AsHandOffWriter only when the wrapped store has it); it fails like
// any other write, all of it or none.
func (s *Store) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	const m = "WriteHandOff"
	hw, ok := impl.AsHandOffWriter(s.inner)
	if !ok {
		return impl.HandOffResult{}, fmt.Errorf("%s: the wrapped %T has no hand-off write", m, s.inner)
	}
	if err := s.before(m); err != nil {
		return impl.HandOffResult{}, err
	}
	res, err := hw.WriteHandOff(ctx, w)
	if err = s.after(m, err); err != nil {
		return impl.HandOffResult{}, err
	}
	return res, nil
}

func (s *Store) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	const m = "Claim"
	if err := s.before(m); err != nil {
		return nil, err
	}
	msgs, err := s.inner.Claim(ctx, req)
	if err = s.after(m, err); err != nil {
		return nil, err
	}
	return msgs, nil
}

func (s *Store) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	const m = "Ack"
	if err := s.before(m); err != nil {
		return 0, err
	}
	n, err := s.inner.Ack(ctx, keys)
	if err = s.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	const m = "Fail"
	if err := s.before(m); err != nil {
		return impl.Message{}, false, err
	}
	msg, ok, err := s.inner.Fail(ctx, req)
	if err = s.after(m, err); err != nil {
		return impl.Message{}, false, err
	}
	return msg, ok, nil
}

func (s *Store) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	const m = "Requeue"
	if err := s.before(m); err != nil {
		return false, err
	}
	ok, err := s.inner.Requeue(ctx, key, now)
	if err = s.after(m, err); err != nil {
		return false, err
	}
	return ok, nil
}

func (s *Store) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	if err := s.before("ListMessages"); err != nil {
		return nil, err
	}
	return s.inner.ListMessages(ctx, subscriber)
}

func (s *Store) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	const m = "DeleteExpired"
	if err := s.before(m); err != nil {
		return 0, err
	}
	n, err := s.inner.DeleteExpired(ctx, cutoff, now)
	if err = s.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (int, error) {
	const m = "TrimPerSubscriber"
	if err := s.before(m); err != nil {
		return 0, err
	}
	n, err := s.inner.TrimPerSubscriber(ctx, max, now)
	if err = s.after(m, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := s.before("GetDelivered"); err != nil {
		return nil, err
	}
	return s.inner.GetDelivered(ctx, app, source)
}

func (s *Store) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	const m = "RecordDelivered"
	if err := s.before(m); err != nil {
		return err
	}
	return s.after(m, s.inner.RecordDelivered(ctx, app, source, items, deleted))
}

func (s *Store) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	const m = "MarkProcessed"
	if err := s.before(m); err != nil {
		return false, err
	}
	fresh, err := s.inner.MarkProcessed(ctx, req)
	if err = s.after(m, err); err != nil {
		return false, err
	}
	return fresh, nil
}

// Close is never faulted and leaves the inner store open: the simulator's
// nodes share one store, which it closes itself.
func (s *Store) Close() error { return nil }

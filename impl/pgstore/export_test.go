package pgstore

import (
	"context"

	"github.com/deliverysim/deliverysim/impl"
)

// SetCopyMinRows sets the batch size from which s enqueues by COPY first,
// so that tests can send small batches down that path.
func (s *Store) SetCopyMinRows(n int) { s.copyMinRows = n }

// SetRangeMinKeys sets how many keys of one subscriber a hand-off must
// ack for them to be deleted by the guarded range scan, so that tests can
// send small acks down that path.
func (s *Store) SetRangeMinKeys(n int) { s.rangeMinKeys = n }

// RangeAcked is how many rows hand-off acks have deleted by a range scan.
func (s *Store) RangeAcked() int64 { return s.rangeAcked.Load() }

// CopyOnly runs just the COPY attempt of Enqueue/EnqueueLeased on msgs, in
// one transaction of its own, whatever their number: copied says whether
// it inserted them, and when it did not, nothing may have been written.
func (s *Store) CopyOnly(ctx context.Context, msgs []impl.Message, leased bool) (copied bool, err error) {
	r, err := newEnqueueRows(msgs, leased)
	if err != nil {
		return false, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	return copyIn(ctx, conn, r, leased)
}

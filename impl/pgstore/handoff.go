package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
)

var _ impl.HandOffWriter = (*Store)(nil)

// errCopyConflict: the COPY of a hand-off found a key present, which
// aborted the transaction; it is run again with the ON CONFLICT insert.
var errCopyConflict = errors.New("pgstore: a key of the leased enqueue is present")

// WriteHandOff implements impl.HandOffWriter as one SERIALIZABLE
// transaction: the ack's DELETEs (ackPlan), the leased insert (COPY first, as
// EnqueueLeased, and if a key is present the whole transaction again with
// the ON CONFLICT insert), then the cursor upserts, and one COMMIT. The
// commit is what a replay's batch waits for (it waits for the WAL to reach
// the disk), so this costs one commit where the three separate calls cost
// three. Retries and error classes are those of every other call (do).
func (s *Store) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	const op = "write hand-off"
	for _, k := range w.Ack {
		if err := checkText("message key", k.Subscriber, k.EventID); err != nil {
			return impl.HandOffResult{}, classify(op, true, err)
		}
	}
	acks := newAckPlan(w.Ack, s.rangeMinKeys)
	var rows *enqueueRows
	if len(w.Enqueue) > 0 {
		var err error
		if rows, err = newEnqueueRows(w.Enqueue, true); err != nil {
			return impl.HandOffResult{}, classify(op, true, err)
		}
	}
	var adv *cursorAdvance
	if len(w.Cursors) > 0 {
		var err error
		if adv, err = newCursorAdvance(w.Cursors); err != nil {
			return impl.HandOffResult{}, classify(op, true, err)
		}
	}
	var res impl.HandOffResult
	if rows != nil {
		res.Inserted = make([]bool, len(w.Enqueue))
	}
	if adv != nil {
		res.Written = make([]bool, len(w.Cursors))
	}
	tryCopy := rows != nil && len(rows.subs) >= s.copyMinRows
	err := s.do(ctx, op, true, func(ctx context.Context, q querier) error {
		err := s.handOffTx(ctx, q, acks, rows, adv, &res, tryCopy)
		if errors.Is(err, errCopyConflict) {
			tryCopy = false // for this and every later attempt
			err = s.handOffTx(ctx, q, acks, rows, adv, &res, false)
		}
		return err
	})
	if err != nil {
		return impl.HandOffResult{}, err
	}
	return res, nil
}

// handOffTx runs the transaction in three round trips, as many as the
// three separate calls took, with one commit instead of three: a batch of
// BEGIN and the DELETEs, the COPY (or the ON CONFLICT insert), and a batch
// of the cursor upserts and COMMIT (one batch in all without messages).
// Any failure rolls back before the connection goes back to the pool.
//
// One round trip is possible (the extended protocol lets a COPY's data
// follow its Execute in a pipeline with the other statements and one
// Sync), but it did not pay: tried with pgconn's Frontend and
// ReceiveMessage, 200 hand-offs of 1000 rows took as long or longer (wall
// median of 5 on a loaded 2-core machine 7.96 s against 7.37 s; the
// backend's CPU higher in all 5 pairs, by 2-42%, median 15%). The time is
// server CPU, not round trips: a hand-off costs what the batched COPY
// baseline's transaction costs plus the ack's delete (ack.go), and that
// delete is most of the difference.
func (s *Store) handOffTx(ctx context.Context, q querier, acks ackPlan, rows *enqueueRows, adv *cursorAdvance, res *impl.HandOffResult, tryCopy bool) (err error) {
	committed := false
	defer rollbackUnlessCommitted(ctx, q, &committed)
	res.Acked = 0
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	acks.queue(b, s, &res.Acked)
	if rows != nil {
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		clear(res.Inserted)
		if tryCopy {
			copied, err := copyIn(ctx, q, rows, true)
			if err != nil {
				return err
			}
			if !copied {
				return errCopyConflict
			}
			for _, i := range rows.index {
				res.Inserted[i] = true
			}
		} else if err := insertLeased(ctx, q, rows, res.Inserted); err != nil {
			return err
		}
	}
	if adv != nil {
		adv.queue(b, res.Written)
	}
	b.Queue("COMMIT")
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	committed = true
	return nil
}

// insertLeased runs enqueueLeasedSQL for rows and marks the entries it
// inserted.
func insertLeased(ctx context.Context, q querier, r *enqueueRows, inserted []bool) error {
	byKey := make(map[impl.MessageKey]int, len(r.index))
	for j, i := range r.index {
		byKey[impl.MessageKey{Subscriber: r.subs[j], EventID: r.events[j]}] = i
	}
	rows, err := q.Query(ctx, enqueueLeasedSQL, r.subs, r.events, r.streams, r.majors, r.minors, r.ids, r.payloads, r.created,
		r.leaseOwners, r.leaseUntils)
	if err != nil {
		return err
	}
	var k impl.MessageKey
	_, err = pgx.ForEachRow(rows, []any{&k.Subscriber, &k.EventID}, func() error {
		inserted[byKey[k]] = true
		return nil
	})
	return err
}

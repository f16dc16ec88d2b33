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
	var rows *handOffRows
	if len(w.Enqueue) > 0 {
		if err := checkMessages(w.Enqueue, true); err != nil {
			return impl.HandOffResult{}, classify(op, true, err)
		}
		rows = &handOffRows{msgs: w.Enqueue, tryCopy: len(w.Enqueue) >= s.copyMinRows}
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
	err := s.do(ctx, op, true, func(ctx context.Context, q querier) error {
		err := s.handOffTx(ctx, q, acks, rows, adv, &res)
		if errors.Is(err, errCopyConflict) {
			rows.tryCopy = false // for this and every later attempt
			err = s.handOffTx(ctx, q, acks, rows, adv, &res)
		}
		return err
	})
	if err != nil {
		return impl.HandOffResult{}, err
	}
	return res, nil
}

// handOffRows is the leased insert of a hand-off: the messages, checked,
// and their rows and COPY data once built (build).
type handOffRows struct {
	msgs    []impl.Message
	tryCopy bool // COPY first (else the ON CONFLICT insert alone)
	rows    *enqueueRows
	data    []byte // rows.copyData(true), if tryCopy
}

// build makes the rows and, if they will be COPYed, their data, the first
// time it is called; a retried attempt reuses them.
func (h *handOffRows) build() {
	if h.rows == nil {
		h.rows = buildEnqueueRows(h.msgs, true)
	}
	if h.tryCopy && h.data == nil {
		h.data = h.rows.copyData(true)
	}
}

// handOffTx runs the transaction in three round trips, as many as the
// three separate calls took, with one commit instead of three: a batch of
// BEGIN and the DELETEs, the COPY (or the ON CONFLICT insert), and a batch
// of the cursor upserts and COMMIT (one batch in all without messages).
// Any failure rolls back before the connection goes back to the pool.
//
// The rows are built and encoded for the COPY after the first batch is
// sent and before its results are read, while the server runs BEGIN and
// the ack's deletes (about 2 ms for 1000 keys), instead of before the
// transaction with the server idle: for 1000 messages that work is
// 0.6-0.8 ms of client CPU (mostly allocation) on a loaded 2-core machine,
// about 0.15 s of a 200k-event replay's critical path.
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
func (s *Store) handOffTx(ctx context.Context, q querier, acks ackPlan, h *handOffRows, adv *cursorAdvance, res *impl.HandOffResult) (err error) {
	committed := false
	defer rollbackUnlessCommitted(ctx, q, &committed)
	res.Acked = 0
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	acks.queue(b, s, &res.Acked)
	if h != nil {
		sent := q.SendBatch(ctx, b)
		h.build()
		if err := sent.Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		clear(res.Inserted)
		if h.tryCopy {
			copied, err := copyIn(ctx, q, h.data, true)
			if err != nil {
				return err
			}
			if !copied {
				return errCopyConflict
			}
			for _, i := range h.rows.index {
				res.Inserted[i] = true
			}
		} else if err := insertLeased(ctx, q, h.rows, res.Inserted); err != nil {
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

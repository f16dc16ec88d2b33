package pgstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// The columns a COPY of new messages fills, in the order copyData writes
// them; the rest take their defaults, as in enqueueSQL. copyData encodes
// each in the binary format of the column's type in migrations (text,
// bigint, bytea): a migration that changes one of these types must change
// copyData too, or every COPY fails with a format error (the tests see it).
const (
	copyColsSQL   = `subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at`
	copySQL       = `COPY messages (` + copyColsSQL + `) FROM STDIN (FORMAT binary)`
	copyLeasedSQL = `COPY messages (` + copyColsSQL + `, lease_owner, lease_until) FROM STDIN (FORMAT binary)`
)

// defaultCopyMinRows: below this many rows the unnest INSERT is faster.
// COPY has a fixed cost of its own (the statement is parsed and set up
// anew every time, and its data goes in separate protocol messages) that
// made a batch of 1 about 30% slower; from about 25 rows up COPY wins, and
// at 100 and 1000 it took 65-80% of the INSERT's time (BenchmarkEnqueue).
const defaultCopyMinRows = 32

// copyIn tries the batch as one plain COPY into messages, which succeeds
// exactly when none of its keys is present yet: the common case (a replay
// enqueues events it has never seen) and the cheap one. COPY inserts the
// heap a page at a time and skips what ON CONFLICT costs per row (a probe
// of the key index before the insert, a speculative heap tuple and a
// confirm record) and, for EnqueueLeased, the RETURNING rows.
//
// A present key fails the whole statement with a unique violation (or,
// under SERIALIZABLE, a serialization failure if a concurrent transaction
// inserted it, which do retries). The implicit transaction rolls back,
// nothing was written, and copied is false: the caller then sends its ON
// CONFLICT statement, in a transaction of its own, as if the COPY had never
// been tried. So every call still takes effect as one serializable
// transaction with the contract's results. COPY takes the same
// predicate-lock checks on the key index as INSERT.
//
// A batch that conflicts pays for the failed COPY on top, up to about the
// cost of a successful one (COPY buffers up to 1000 rows before it inserts
// their keys), and leaves its rows as dead tuples for vacuum. That is rare
// by design: the engine enqueues a batch before it advances the cursor
// past it, so after a restart only the batches between the last cursor
// write and the crash come again. Any other error is returned for do to
// retry or classify.
func copyIn(ctx context.Context, q querier, r *enqueueRows, leased bool) (copied bool, err error) {
	sql := copySQL
	if leased {
		sql = copyLeasedSQL
	}
	// pgx's CopyFrom would encode every value through its type map, boxing
	// each int64 in an interface, and feed it through a pipe; writing the
	// rows directly saved about 1 ms per batch of 1000, client time that
	// on a small machine competes with the server's.
	_, err = q.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(r.copyData(leased)), sql)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
		return false, nil
	}
	return err == nil, err
}

// tryCopy is copyIn for a batch of at least s.copyMinRows rows; a smaller
// one is not tried (copied false, no error).
func (s *Store) tryCopy(ctx context.Context, q querier, r *enqueueRows, leased bool) (copied bool, err error) {
	if len(r.subs) < s.copyMinRows {
		return false, nil
	}
	return copyIn(ctx, q, r, leased)
}

// copyData is r's rows as the data of a binary-format COPY: a header, then
// per row its field count and each field as a length-prefixed value (-1 for
// NULL), then the trailer.
func (r *enqueueRows) copyData(leased bool) []byte {
	fields := 9
	if leased {
		fields = 11
	}
	size := 19 + 2
	for j := range r.subs {
		size += 2 + 4*fields + 8*4 + len(r.subs[j]) + len(r.events[j]) + len(r.streams[j]) + len(r.ids[j]) + len(r.payloads[j])
		if leased {
			size += 8 + len(r.leaseOwners[j])
		}
	}
	b := make([]byte, 0, size)
	b = append(b, "PGCOPY\n\xff\r\n\x00"...)
	b = binary.BigEndian.AppendUint32(b, 0) // flags: no OIDs
	b = binary.BigEndian.AppendUint32(b, 0) // no header extension
	text := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	bigint := func(v int64) {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	for j := range r.subs {
		b = binary.BigEndian.AppendUint16(b, uint16(fields))
		text(r.subs[j])
		text(r.events[j])
		text(r.streams[j])
		bigint(r.majors[j])
		bigint(r.minors[j])
		text(r.ids[j])
		if p := r.payloads[j]; p == nil { // nilIfEmpty made every empty payload nil: NULL
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32)
		} else {
			b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		bigint(r.created[j])
		bigint(r.created[j])
		if leased {
			text(r.leaseOwners[j])
			bigint(r.leaseUntils[j])
		}
	}
	return binary.BigEndian.AppendUint16(b, math.MaxUint16) // trailer: -1
}

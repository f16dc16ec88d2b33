package pgstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
)

const messageCols = `subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at,
    attempts, next_attempt_at, lease_owner, lease_until, dead, last_error`

// NextAttemptAt starts at CreatedAt; the rest of the state takes the
// column defaults (no attempts, no lease, live, no error).
const enqueueSQL = `INSERT INTO messages (subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at)
SELECT s, e, st, ma, mi, pid, p, ca, ca
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bytea[], $8::bigint[])
    AS u(s, e, st, ma, mi, pid, p, ca)
ON CONFLICT (subscriber, event_id) DO NOTHING`

// Like enqueueSQL, with each row's lease (owner "" and until 0: none).
const enqueueLeasedSQL = `INSERT INTO messages (subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at,
    lease_owner, lease_until)
SELECT s, e, st, ma, mi, pid, p, ca, ca, lo, lu
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], $7::bytea[], $8::bigint[],
    $9::text[], $10::bigint[]) AS u(s, e, st, ma, mi, pid, p, ca, lo, lu)
ON CONFLICT (subscriber, event_id) DO NOTHING
RETURNING subscriber, event_id`

// Claim picks the first due messages in queue order and leases them. It
// locks with plain FOR UPDATE, not SKIP LOCKED: a claim that skips a row
// another transaction holds can pass over a message that is due whichever
// way that race ends (a lease that expires before this claim's now, a
// failure that makes the message due again), which is not linearizable and
// which the conformance suite's Linearizability/Queue check catches. Under
// SERIALIZABLE a claim that waited for a row another claim took fails with
// a serialization error and is retried, so two claims never lease one
// message.
const claimSQL = `UPDATE messages m SET lease_owner = $1, lease_until = $2
FROM (
    SELECT subscriber, event_id FROM messages
    WHERE NOT dead AND next_attempt_at <= $3 AND lease_until <= $3 /*filter*/
    ORDER BY subscriber, created_at, event_id
    LIMIT $4
    FOR UPDATE
) due
WHERE m.subscriber = due.subscriber AND m.event_id = due.event_id
RETURNING ` + prefixedMessageCols

const prefixedMessageCols = `m.subscriber, m.event_id, m.stream, m.pos_major, m.pos_minor, m.pos_id, m.payload, m.created_at,
    m.attempts, m.next_attempt_at, m.lease_owner, m.lease_until, m.dead, m.last_error`

var (
	claimAnySQL = fmtClaim("")
	claimOneSQL = fmtClaim("AND subscriber = $5")
)

func fmtClaim(filter string) string {
	return strings.Replace(claimSQL, "/*filter*/", filter, 1)
}

const ackSQL = `DELETE FROM messages m
USING unnest($1::text[], $2::text[]) AS k(s, e)
WHERE m.subscriber = k.s AND m.event_id = k.e`

const failSQL = `UPDATE messages SET
    attempts = attempts + 1, lease_owner = '', lease_until = 0,
    last_error = $4, next_attempt_at = $5, dead = attempts + 1 >= $6
WHERE subscriber = $1 AND event_id = $2 AND lease_owner = $3
RETURNING ` + messageCols

const requeueSQL = `UPDATE messages SET dead = false, attempts = 0, next_attempt_at = $3
WHERE subscriber = $1 AND event_id = $2 AND dead`

// A message under an active lease is never purged; the condition is on the
// target row itself so that it is re-checked if a claimer leased the row
// while this statement waited for it.
//
// The same statement counts what it deleted in retention_drops, per
// subscriber (countDrops), so a count is durable exactly when its rows'
// deletion is (RetentionDrops reads it).
var deleteExpiredSQL = `WITH d AS (
    DELETE FROM messages WHERE created_at < $1 AND lease_until <= $2
        AND ($3::text[] IS NULL OR subscriber = ANY($3))
    RETURNING subscriber
)` + countDrops("ttl")

// countDrops is the tail of a retention statement whose CTE d returns the
// subscriber of each deleted row: it adds them to retention_drops under
// rule and selects how many rows were deleted.
func countDrops(rule string) string {
	return `, c AS (
    INSERT INTO retention_drops (subscriber, rule, n)
    SELECT subscriber, '` + rule + `', count(*) FROM d GROUP BY subscriber
    ON CONFLICT (subscriber, rule) DO UPDATE SET n = retention_drops.n + excluded.n
)
SELECT count(*) FROM d`
}

// Per subscriber over the cap, delete the (total - cap) oldest messages that
// are not under an active lease. Leased messages count toward total but are
// never chosen: "unleased_upto" is a running count of unleased messages in
// queue order, so the oldest unleased ones are the ones with the smallest.
var trimSQL = `WITH d AS (
DELETE FROM messages m
USING (
    SELECT subscriber, event_id, leased,
        count(*) FILTER (WHERE NOT leased) OVER (
            PARTITION BY subscriber ORDER BY created_at, event_id ROWS UNBOUNDED PRECEDING) AS unleased_upto,
        count(*) OVER (PARTITION BY subscriber) AS total
    FROM (
        SELECT subscriber, event_id, created_at, lease_until > $2 AS leased
        FROM messages
        WHERE subscriber IN (SELECT subscriber FROM messages
            WHERE $3::text[] IS NULL OR subscriber = ANY($3)
            GROUP BY subscriber HAVING count(*) > $1)
    ) x
) r
WHERE m.subscriber = r.subscriber AND m.event_id = r.event_id
    AND NOT r.leased AND r.unleased_upto <= r.total - $1
    AND m.lease_until <= $2
RETURNING m.subscriber
)` + countDrops("cap")

func scanMessage(row pgx.Row) (impl.Message, error) {
	var m impl.Message
	var created, next, until int64
	var attempts int32
	err := row.Scan(&m.Subscriber, &m.EventID, &m.Stream, &m.Pos.Major, &m.Pos.Minor, &m.Pos.ID, &m.Payload, &created,
		&attempts, &next, &m.LeaseOwner, &until, &m.Dead, &m.LastError)
	m.CreatedAt, m.NextAttemptAt, m.LeaseUntil = impl.TimeOf(created), impl.TimeOf(next), impl.TimeOf(until)
	m.Attempts = int(attempts)
	return m, err
}

// enqueueRows is a batch of messages as column arrays for unnest: the first
// entry of each key only (later ones would be "already present"), sorted by
// key so concurrent enqueuers take index locks in one order.
type enqueueRows struct {
	index                      []int // position in the caller's slice
	subs, events, streams, ids []string
	majors, minors, created    []int64
	payloads                   [][]byte
	leaseOwners                []string
	leaseUntils                []int64
}

func newEnqueueRows(msgs []impl.Message, leased bool) (*enqueueRows, error) {
	seen := make(map[impl.MessageKey]bool, len(msgs))
	order := make([]int, 0, len(msgs))
	for i, m := range msgs {
		if err := checkText("message", m.Subscriber, m.EventID, m.Stream, m.Pos.ID); err != nil {
			return nil, err
		}
		if err := checkText("lease owner", m.LeaseOwner); leased && err != nil {
			return nil, err
		}
		if !seen[m.Key()] {
			seen[m.Key()] = true
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return compareMessageKeys(msgs[a].Key(), msgs[b].Key()) })
	n := len(order)
	r := &enqueueRows{index: order,
		subs: make([]string, n), events: make([]string, n), streams: make([]string, n), ids: make([]string, n),
		majors: make([]int64, n), minors: make([]int64, n), created: make([]int64, n), payloads: make([][]byte, n)}
	if leased {
		r.leaseOwners, r.leaseUntils = make([]string, n), make([]int64, n)
	}
	for j, i := range order {
		m := msgs[i]
		r.subs[j], r.events[j], r.streams[j], r.ids[j] = m.Subscriber, m.EventID, m.Stream, m.Pos.ID
		r.majors[j], r.minors[j], r.created[j] = m.Pos.Major, m.Pos.Minor, impl.NanosOf(m.CreatedAt)
		r.payloads[j] = nilIfEmpty(m.Payload)
		if leased && m.LeaseOwner != "" {
			r.leaseOwners[j], r.leaseUntils[j] = m.LeaseOwner, impl.NanosOf(m.LeaseUntil)
		}
	}
	return r, nil
}

// Enqueue implements impl.Store. When a key repeats within msgs the first
// entry is the one inserted, as if the messages were enqueued one by one.
func (s *Store) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	r, err := newEnqueueRows(msgs, false)
	if err != nil {
		return 0, classify("enqueue", true, err)
	}
	var inserted int
	err = s.do(ctx, "enqueue", true, func(ctx context.Context, q querier) error {
		if copied, err := s.tryCopy(ctx, q, r, false); copied || err != nil {
			inserted = len(r.index)
			return err
		}
		tag, err := q.Exec(ctx, enqueueSQL, r.subs, r.events, r.streams, r.majors, r.minors, r.ids, r.payloads, r.created)
		inserted = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, err
	}
	return inserted, nil
}

// EnqueueLeased implements impl.LeasingEnqueuer: Enqueue, with the lease
// of each message whose LeaseOwner is set stored as given, in the same
// statement. An empty msgs gives nil.
func (s *Store) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	r, err := newEnqueueRows(msgs, true)
	if err != nil {
		return nil, classify("enqueue leased", true, err)
	}
	inserted := make([]bool, len(msgs))
	err = s.do(ctx, "enqueue leased", true, func(ctx context.Context, q querier) error {
		clear(inserted)
		if copied, err := s.tryCopy(ctx, q, r, true); copied || err != nil {
			for _, i := range r.index {
				inserted[i] = copied
			}
			return err
		}
		return insertLeased(ctx, q, r, inserted)
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

// Claim implements impl.Store. A Limit of zero or less claims nothing; no
// message claimed gives nil.
func (s *Store) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if req.Limit <= 0 {
		return nil, nil
	}
	if err := checkText("claim", req.Subscriber, req.Owner); err != nil {
		return nil, classify("claim", true, err)
	}
	now := impl.NanosOf(req.Now)
	until := now + int64(req.Lease)
	sql, args := claimAnySQL, []any{req.Owner, until, now, req.Limit}
	if req.Subscriber != "" {
		sql, args = claimOneSQL, append(args, req.Subscriber)
	}
	out, err := queryAll(ctx, s, "claim", true, scanMessage, sql, args...)
	slices.SortFunc(out, impl.QueueCompare) // RETURNING has no order
	return out, err
}

// Ack implements impl.Store.
func (s *Store) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	for _, k := range keys {
		if err := checkText("message key", k.Subscriber, k.EventID); err != nil {
			return 0, classify("ack", true, err)
		}
	}
	var deleted int
	plan := newAckPlan(keys, s.rangeMinKeys)
	if len(plan.ranges) > 0 || len(plan.subs) >= probeMinKeys {
		// Range deletes and the planner settings that keep many keys'
		// deletes to index probes (ack.go) need a transaction block.
		err := s.do(ctx, "ack", true, func(ctx context.Context, q querier) error {
			deleted = 0
			return ackTx(ctx, q, plan, s, &deleted)
		})
		if err != nil {
			return 0, err
		}
		return deleted, nil
	}
	err := s.do(ctx, "ack", true, func(ctx context.Context, q querier) error {
		tag, err := q.Exec(ctx, ackSQL, plan.subs, plan.events)
		deleted = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, err
	}
	return deleted, nil
}

// Fail implements impl.Store. The message is dead once Attempts >=
// maxAttempts; NextAttemptAt is set to nextAttempt either way. The empty
// owner never holds a lease.
func (s *Store) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	key, owner, nextAttempt, maxAttempts, reason := req.Key, req.Owner, req.NextAttempt, req.MaxAttempts, req.Reason
	if owner == "" {
		return impl.Message{}, false, nil
	}
	if err := checkText("fail", key.Subscriber, key.EventID, owner, reason); err != nil {
		return impl.Message{}, false, classify("fail", true, err)
	}
	return queryOne(ctx, s, "fail", true, scanMessage, failSQL, key.Subscriber, key.EventID, owner, reason, impl.NanosOf(nextAttempt), maxAttempts)
}

// Requeue implements impl.Store. LastError is kept as a record of why the
// message died.
func (s *Store) Requeue(ctx context.Context, key impl.MessageKey, now time.Time) (bool, error) {
	if err := checkText("message key", key.Subscriber, key.EventID); err != nil {
		return false, classify("requeue", true, err)
	}
	var ok bool
	err := s.do(ctx, "requeue", true, func(ctx context.Context, q querier) error {
		tag, err := q.Exec(ctx, requeueSQL, key.Subscriber, key.EventID, impl.NanosOf(now))
		ok = tag.RowsAffected() == 1
		return err
	})
	return ok && err == nil, err
}

const (
	listAllSQL = "SELECT " + messageCols + " FROM messages ORDER BY subscriber, created_at, event_id"
	listOneSQL = "SELECT " + messageCols + " FROM messages WHERE subscriber = $1 ORDER BY created_at, event_id"
)

// ListMessages implements impl.Store. No messages gives nil.
func (s *Store) ListMessages(ctx context.Context, subscriber string) ([]impl.Message, error) {
	if err := checkText("subscriber", subscriber); err != nil {
		return nil, classify("list messages", false, err)
	}
	if subscriber == "" {
		return queryAll(ctx, s, "list messages", false, scanMessage, listAllSQL)
	}
	return queryAll(ctx, s, "list messages", false, scanMessage, listOneSQL, subscriber)
}

// DeleteExpired implements impl.Store.
func (s *Store) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	return s.deleteExpired(ctx, nil, cutoff, now)
}

// DeleteExpiredOf is DeleteExpired limited to the messages of subs (none
// for an empty subs). The reference runtime's held-only retention scope
// uses it: seed 003 ages the messages held for bots without a key.
func (s *Store) DeleteExpiredOf(ctx context.Context, subs []string, cutoff, now time.Time) (int, error) {
	if len(subs) == 0 {
		return 0, nil
	}
	return s.deleteExpired(ctx, subs, cutoff, now)
}

// deleteExpired runs deleteExpiredSQL; a nil subs is every subscriber.
func (s *Store) deleteExpired(ctx context.Context, subs []string, cutoff, now time.Time) (int, error) {
	var n int
	err := s.do(ctx, "delete expired", true, func(ctx context.Context, q querier) error {
		return q.QueryRow(ctx, deleteExpiredSQL, impl.NanosOf(cutoff), impl.NanosOf(now), subs).Scan(&n)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// TrimPerSubscriber implements impl.Store. A subscriber whose leased
// messages alone exceed max keeps all of them and loses every other one.
func (s *Store) TrimPerSubscriber(ctx context.Context, limit int, now time.Time) (int, error) {
	return s.trim(ctx, nil, limit, now)
}

// TrimPerSubscriberOf is TrimPerSubscriber limited to the subscribers subs
// (none for an empty subs), as DeleteExpiredOf is.
func (s *Store) TrimPerSubscriberOf(ctx context.Context, subs []string, limit int, now time.Time) (int, error) {
	if len(subs) == 0 {
		return 0, nil
	}
	return s.trim(ctx, subs, limit, now)
}

// TrimKeepingOldestOf is TrimPerSubscriberOf with the queue order
// reversed: it deletes each bot's newest messages beyond limit (seed 003's
// bug; the chaos plant retention-keeps-oldest), counted as cap drops.
func (s *Store) TrimKeepingOldestOf(ctx context.Context, subs []string, limit int, now time.Time) (int, error) {
	if len(subs) == 0 {
		return 0, nil
	}
	return s.trimBy(ctx, trimNewestSQL, subs, limit, now)
}

// trimNewestSQL is trimSQL counting unleased messages from the newest.
var trimNewestSQL = strings.Replace(trimSQL, "ORDER BY created_at, event_id", "ORDER BY created_at DESC, event_id DESC", 1)

// trim runs trimSQL; a nil subs is every subscriber.
func (s *Store) trim(ctx context.Context, subs []string, limit int, now time.Time) (int, error) {
	return s.trimBy(ctx, trimSQL, subs, limit, now)
}

func (s *Store) trimBy(ctx context.Context, sql string, subs []string, limit int, now time.Time) (int, error) {
	limit = max(limit, 0) // "at most a negative number" can only mean none
	var n int
	err := s.do(ctx, "trim per subscriber", true, func(ctx context.Context, q querier) error {
		return q.QueryRow(ctx, sql, int64(limit), impl.NanosOf(now), subs).Scan(&n)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// RetentionDrops implements impl.RetentionCounter: the counts
// DeleteExpired and TrimPerSubscriber wrote in the statements that deleted.
func (s *Store) RetentionDrops(ctx context.Context) ([]impl.RetentionDrops, error) {
	var out []impl.RetentionDrops
	err := s.do(ctx, "retention drops", false, func(ctx context.Context, q querier) error {
		out = out[:0]
		rows, err := q.Query(ctx, `SELECT subscriber,
    coalesce(sum(n) FILTER (WHERE rule = 'ttl'), 0), coalesce(sum(n) FILTER (WHERE rule = 'cap'), 0)
FROM retention_drops GROUP BY subscriber ORDER BY subscriber`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d impl.RetentionDrops
			if err := rows.Scan(&d.Subscriber, &d.TTL, &d.Cap); err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	return out, err
}

func compareMessageKeys(a, b impl.MessageKey) int {
	return cmp.Or(strings.Compare(a.Subscriber, b.Subscriber), strings.Compare(a.EventID, b.EventID))
}

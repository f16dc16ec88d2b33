package pgstore

import (
	"context"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliverysim/deliverysim/impl"
)

// An ack deletes its keys' rows. ackSQL finds each row by its own probe of
// the primary key (a descent from the root per key), which in the queued
// replay cost about as much server time as inserting the row had. The keys
// a hand-off acks are mostly one subscriber's and lie next to each other in
// the key index (one upstream batch, one stream): one index range scan over
// [first key, last key] that keeps the rows whose key is in the set finds
// them at a third of the cost (EXPLAIN ANALYZE of 1000 keys: about 1 ms
// against 3-4 ms; server CPU of a 200k-event replay's deletes: 0.58 s to
// about 0.3 s).
//
// The range scan is only cheap when the range holds few rows besides the
// acked ones, which the keys alone cannot tell (event ids may be random, and
// a subscriber's backlog may lie between two of them). So each range delete
// is guarded: it first walks at most rangeWalk(n) entries of the range, and
// only if the range ended within them does the range delete run; otherwise
// the same keys go through the per-key probes. The range delete walks, and
// passes its verdict to the fallback in a transaction-local setting; each
// statement tests it as a one-time filter, evaluated once before any row
// is touched, so exactly one of the two deletes anything. Whichever runs,
// the rows deleted are exactly the rows whose key was acked, as with ackSQL;
// the guard bounds the cost of a sparse range by the walk (about a third of
// a probe per entry) instead of the size of the queue.
//
// Where a hand-off's delete of 1000 dense keys goes (PostgreSQL 15, psql
// EXPLAIN ANALYZE, steady state): the plain range DELETE alone about
// 0.65 ms; the membership test adds about 0.3 ms of planning (the custom
// plan's 1000-element constant) and 0.2 ms of execution; the guard's walk
// about 0.35 ms. Over 200 hand-offs the backend's CPU (schedstat) for the
// ack statements was about 0.47 s with this pair, 0.39 s for the range
// delete with the membership test and no guard, 0.32 s for the bare range
// delete, and 0.46 s for a guard that compares the walked ids with the
// keys (array equality, so the delete needs no membership test): the walk
// costs what the membership test saves.

// defaultRangeMinKeys is the fewest distinct keys of one subscriber that
// get the guarded range delete; fewer are probed one by one with the rest
// (Store.rangeMinKeys; tests lower it to 1).
const defaultRangeMinKeys = 32

// rangeWalk is how many index entries the guard walks for n keys: n plus
// room for a few rows that stay (failed deliveries between acked ones).
func rangeWalk(n int) int { return n + n/8 + 8 }

// ackRangeSQL deletes subscriber $1's rows in [$2, $3] whose key is in $5,
// when the range has fewer than $4 rows. It runs with custom plans
// (plan_cache_mode force_custom_plan), so that $5 is a constant and the
// membership test a hash lookup; with a generic plan it would compare each
// row with every key. Its guard walks at most $4 entries of the range and
// records its verdict in the transaction's setting $6 (ackDenseSetting),
// which ackRangeFallbackSQL reads instead of walking the range again
// (after the range delete, that second walk met every deleted entry and
// looked each one up in the heap to see it was gone).
const ackRangeSQL = `DELETE FROM messages m
WHERE m.subscriber = $1 AND m.event_id >= $2 AND m.event_id <= $3 AND m.event_id = ANY($5::text[])
    AND (SELECT set_config($6, (count(*) < $4)::text, true) FROM (
        SELECT FROM messages WHERE subscriber = $1 AND event_id >= $2 AND event_id <= $3 LIMIT $4) walk) = 'true'`

// probeMinKeys is the fewest keys of a plain Ack (no range) sent in a
// transaction with probeKeysSQL: fewer are planned as probes anyway.
const probeMinKeys = 32

// probeKeysSQL makes the rest of the transaction plan joins as nested
// loops of index probes (ackPlan.queue).
const probeKeysSQL = "SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)"

// ackRangeFallbackSQL is ackSQL for subscriber $1's keys $2, when the
// ackRangeSQL of the same keys earlier in the transaction found the range
// too full (setting $3 false). current_setting is stable, so the test is a
// one-time filter: evaluated once, before any row is touched.
const ackRangeFallbackSQL = `DELETE FROM messages m
USING unnest($2::text[]) AS k(e)
WHERE m.subscriber = $1 AND m.event_id = k.e
    AND current_setting($3) = 'false'`

// ackDenseSetting names the setting that carries the guard verdict of the
// i-th range of a transaction to its fallback, local to the transaction
// (set_config's is_local): a custom setting, which any role may set, one
// per range because the range deletes all run before the fallbacks.
func ackDenseSetting(i int) string { return "deliverysim.ack_dense_" + strconv.Itoa(i) }

// ackPlan is the keys of one ack as statements: a guarded range pair per
// subscriber with at least rangeMinKeys distinct keys, and one ackSQL for
// the rest.
type ackPlan struct {
	ranges       []ackRange
	subs, events []string // ackSQL's keys
}

// ackRange is one subscriber's distinct keys in bytewise order, the order
// of the COLLATE "C" key index.
type ackRange struct {
	sub    string
	events []string
}

// newAckPlan groups keys, which the caller has checked, by subscriber; a
// subscriber with at least minRange distinct keys gets a range pair.
func newAckPlan(keys []impl.MessageKey, minRange int) ackPlan {
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, compareMessageKeys)
	sorted = slices.Compact(sorted)
	var p ackPlan
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].Subscriber == sorted[i].Subscriber {
			j++
		}
		if j-i >= minRange {
			r := ackRange{sub: sorted[i].Subscriber, events: make([]string, 0, j-i)}
			for _, k := range sorted[i:j] {
				r.events = append(r.events, k.EventID)
			}
			p.ranges = append(p.ranges, r)
		} else {
			for _, k := range sorted[i:j] {
				p.subs = append(p.subs, k.Subscriber)
				p.events = append(p.events, k.EventID)
			}
		}
		i = j
	}
	return p
}

// empty says whether the plan deletes nothing.
func (p ackPlan) empty() bool { return len(p.ranges) == 0 && len(p.subs) == 0 }

// queue adds the plan's statements to b, inside a transaction block (its
// planner settings are SET LOCAL: handOffTx, ackTx); each adds the rows it
// deleted to *acked, and those of a range delete to s.rangeAcked.
func (p ackPlan) queue(b *pgx.Batch, s *Store, acked *int) {
	if p.empty() {
		return
	}
	// Without statistics (autovacuum is often off where replays are
	// benchmarked, and a queue's table churns) the planner probes the key
	// index per acked key through a bitmap scan; a plain index scan does
	// the same probe with less work.
	b.Queue("SET LOCAL enable_bitmapscan = off")
	count := func(ranged bool) func(pgconn.CommandTag) error {
		return func(tag pgconn.CommandTag) error {
			n := int(tag.RowsAffected())
			*acked += n
			if ranged {
				s.rangeAcked.Add(int64(n))
			}
			return nil
		}
	}
	if len(p.ranges) > 0 {
		b.Queue("SET LOCAL plan_cache_mode = force_custom_plan")
		for i, r := range p.ranges {
			b.Queue(ackRangeSQL, r.sub, r.events[0], r.events[len(r.events)-1], rangeWalk(len(r.events)), r.events, ackDenseSetting(i)).Exec(count(true))
		}
		b.Queue("SET LOCAL plan_cache_mode TO DEFAULT")
	}
	// The per-key deletes below must probe the key index once per key.
	// Without statistics the planner guesses a subscriber holds a few
	// hundred rows and joins the keys with all of them instead: a hash
	// join read a 200,000-row backlog to delete 1,000 sparse keys (173 ms
	// against 8 ms for the probes, EXPLAIN ANALYZE, PostgreSQL 15), and a
	// merge join reads it up to the last key; that is the very cost the
	// range guard sends sparse keys here to avoid.
	b.Queue(probeKeysSQL)
	if len(p.ranges) > 0 {
		for i, r := range p.ranges {
			b.Queue(ackRangeFallbackSQL, r.sub, r.events, ackDenseSetting(i)).Exec(count(false))
		}
	}
	if len(p.subs) > 0 {
		b.Queue(ackSQL, p.subs, p.events).Exec(count(false))
	}
}

// ackTx runs plan as one transaction in one round trip (BEGIN, the
// deletes, COMMIT), adding the rows deleted to *deleted. Any failure rolls
// back before the connection goes back to the pool.
func ackTx(ctx context.Context, q querier, plan ackPlan, s *Store, deleted *int) error {
	committed := false
	defer rollbackUnlessCommitted(ctx, q, &committed)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	plan.queue(b, s, deleted)
	b.Queue("COMMIT")
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	committed = true
	return nil
}

// rollbackUnlessCommitted, deferred by a transaction sent as batches,
// rolls back one left open by a failure before the connection goes back
// to the pool; on a broken connection it is a no-op (the pool drops it).
func rollbackUnlessCommitted(ctx context.Context, q querier, committed *bool) {
	if !*committed && q.Conn().PgConn().TxStatus() != 'I' {
		_, _ = q.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
}

package conformance_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Bugs planted in pgstore that only a database shows: each replaces one
// method of a real pgstore with SQL of its own on the same schema.

// rawPool opens a pool on st's schema with the session time zone of dsn
// and the given default isolation ("" keeps the server's, READ
// COMMITTED): what a hand-written store gets unless it sets them.
func rawPool(t testing.TB, dsn string, st *pgstore.Store, isolation string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{st.Schema()}.Sanitize()
	if isolation != "" {
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = isolation
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// claimWithoutRowLocks claims as a store that forgot FOR UPDATE does: it
// reads the due messages, then leases them by key in a second statement
// that does not check again that they are still due and unleased. Two
// claims that read before either writes both lease the same message.
type claimWithoutRowLocks struct {
	impl.Store
	pool *pgxpool.Pool
}

func (s claimWithoutRowLocks) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if req.Limit <= 0 {
		return nil, nil
	}
	now := impl.NanosOf(req.Now)
	rows, err := s.pool.Query(ctx, `SELECT subscriber, event_id FROM messages
WHERE NOT dead AND next_attempt_at <= $1 AND lease_until <= $1 AND ($2 = '' OR subscriber = $2)
ORDER BY subscriber COLLATE "C", created_at, event_id COLLATE "C" LIMIT $3`, now, req.Subscriber, req.Limit)
	if err != nil {
		return nil, err
	}
	var subs, evs []string
	for rows.Next() {
		var sub, ev string
		if err := rows.Scan(&sub, &ev); err != nil {
			rows.Close()
			return nil, err
		}
		subs, evs = append(subs, sub), append(evs, ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(subs) == 0 {
		return nil, err
	}
	rows, err = s.pool.Query(ctx, `UPDATE messages m SET lease_owner = $1, lease_until = $2
FROM unnest($3::text[], $4::text[]) AS k(s, e) WHERE m.subscriber = k.s AND m.event_id = k.e
RETURNING m.subscriber, m.event_id, m.stream, m.pos_major, m.pos_minor, m.pos_id, m.payload, m.created_at,
    m.attempts, m.next_attempt_at, m.lease_owner, m.lease_until, m.dead, m.last_error`,
		req.Owner, now+int64(req.Lease), subs, evs)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (impl.Message, error) {
		var m impl.Message
		var created, next, until int64
		var attempts int32
		err := r.Scan(&m.Subscriber, &m.EventID, &m.Stream, &m.Pos.Major, &m.Pos.Minor, &m.Pos.ID, &m.Payload, &created,
			&attempts, &next, &m.LeaseOwner, &until, &m.Dead, &m.LastError)
		m.CreatedAt, m.NextAttemptAt, m.LeaseUntil, m.Attempts = impl.TimeOf(created), impl.TimeOf(next), impl.TimeOf(until), int(attempts)
		return m, err
	})
	slices.SortFunc(out, impl.QueueCompare)
	return out, err
}

// ttlShiftedByZone deletes expired messages as a store that hands the
// cutoff to SQL as a wall-clock string does: "2025-03-01 12:00:00" cast to
// timestamptz is read in the session's time zone. On a UTC session it is
// exact (nanoseconds included); elsewhere the cutoff moves by the zone's
// offset and young messages are purged.
type ttlShiftedByZone struct {
	impl.Store
	pool *pgxpool.Pool
}

// It runs SERIALIZABLE and retries serialization failures, as pgstore
// does, so that on a UTC session nothing but the zone sets it apart.
func (s ttlShiftedByZone) DeleteExpired(ctx context.Context, cutoff, now time.Time) (int, error) {
	c := cutoff.UTC()
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM messages
WHERE created_at < extract(epoch FROM $1::text::timestamptz)::bigint * 1000000000 + $2 AND lease_until <= $3`,
			c.Format("2006-01-02 15:04:05"), int64(c.Nanosecond()), impl.NanosOf(now))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.SerializationFailure || pgErr.Code == pgerrcode.DeadlockDetected) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		return int(tag.RowsAffected()), err
	}
}

// plantedPg returns a Factory whose stores are pgstore with one method
// replaced by wrap, in time zone zone.
func plantedPg(t *testing.T, name, zone, isolation string, wrap func(impl.Store, *pgxpool.Pool) impl.Store) conformance.Factory {
	stores := pgtest.NewStoresTZ(t, zone)
	return conformance.Factory{
		Name:     "pgstore+" + name,
		Variant:  "TimeZone=" + zone,
		Features: conformance.Features{Concurrent: true},
		New: func(tb testing.TB) impl.Store {
			st := stores.New(tb)
			return wrap(st, rawPool(tb, stores.DSN(), st, isolation))
		},
	}
}

func claimRace(t *testing.T) conformance.Factory {
	return plantedPg(t, "race:claim-without-row-locks", "UTC", "", func(st impl.Store, p *pgxpool.Pool) impl.Store { return claimWithoutRowLocks{st, p} })
}

func ttlShifted(t *testing.T, zone string) conformance.Factory {
	return plantedPg(t, "bug:ttl-shifted-by-zone", zone, "serializable", func(st impl.Store, p *pgxpool.Pool) impl.Store { return ttlShiftedByZone{st, p} })
}

// The claim race is caught by the Linearizability group; make test runs it
// until caught, at most 3 times (the measured rate is in
// TestRaceCatchRatePostgres).
func TestPostgresPlantedClaimRaceIsCaught(t *testing.T) {
	requireCaught(t, claimRace(t), conformance.GroupLinearizability)
}

// Passes under UTC, caught under America/New_York: what the suite's second
// session time zone is for.
func TestPostgresPlantedZoneShiftedTTLIsCaught(t *testing.T) {
	// The sequential groups: the measured rate (TestZoneShiftCatchRatePostgres)
	// runs the whole suite.
	only := conformance.Only(conformance.GroupContract, conformance.GroupStateMachine)
	utc, err := conformance.Certify([]conformance.Factory{ttlShifted(t, "UTC")}, only, conformance.RapidChecks(20), conformance.ShrinkTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !utc.Passed {
		for _, r := range utc.Failures() {
			t.Errorf("%s: %s\n%.1500s", r.Name, r.Summary, r.Message)
		}
		t.Fatal("the planted TTL delete must be correct on a UTC session (else it proves nothing about zones)")
	}
	ny, err := conformance.Certify([]conformance.Factory{ttlShifted(t, "America/New_York")}, only, conformance.RapidChecks(20), conformance.ShrinkTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ny.Passed {
		t.Fatal("a TTL delete shifted by the session time zone passed under America/New_York")
	}
	var names []string
	for _, r := range ny.Failures() {
		names = append(names, r.Name)
	}
	t.Logf("under America/New_York caught by %s", strings.Join(names, ", "))
}

func TestRaceCatchRatePostgres(t *testing.T) {
	runs := raceRuns(t)
	if caught := catchRate(t, claimRace(t), runs); caught*10 < runs*9 {
		t.Errorf("caught in %d of %d runs; want at least 90%%", caught, runs)
	}
}

// Each run certifies the planted TTL delete under both zones, as certify
// does; it counts as caught when the run fails.
func TestZoneShiftCatchRatePostgres(t *testing.T) {
	runs := raceRuns(t)
	caught, utcFailed := 0, 0
	// One pair of factories: their schemas are recycled from run to run,
	// where new ones per run would hold a pool each until the test ends.
	factories := []conformance.Factory{ttlShifted(t, "UTC"), ttlShifted(t, "America/New_York")}
	for i := range runs {
		cert, err := conformance.Certify(factories, conformance.ArtifactsDir(t.TempDir()), conformance.ShrinkTime(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(convictedBy(t, cert.Failures())) > 0 {
			caught++
		}
		for _, r := range cert.Failures() {
			if r.Variant == "TimeZone=UTC" {
				utcFailed++
				t.Logf("run %d: failed under UTC: %s", i, r.Name)
			}
		}
	}
	t.Logf("zone-shifted TTL delete: caught in %d of %d runs (failures under UTC: %d)", caught, runs, utcFailed)
	if caught*10 < runs*9 {
		t.Errorf("caught in %d of %d runs", caught, runs)
	}
}

// Close closes the wrapper's pool too: a closed store refuses every call.
func (s claimWithoutRowLocks) Close() error { s.pool.Close(); return s.Store.Close() }

func (s ttlShiftedByZone) Close() error { s.pool.Close(); return s.Store.Close() }

// handOffAtRepeatableRead writes a hand-off as a store that trusts
// snapshot isolation to make it atomic does: one REPEATABLE READ
// transaction of the ack's DELETE, an INSERT ... ON CONFLICT DO NOTHING per
// message and a guarded upsert per cursor, retried on serialization
// failures. Each call alone is right. Two hand-offs that cross (one acks a
// key the other enqueues, and the other way round) can both commit, each
// having read the other's key as it was before: the write skew that only
// SERIALIZABLE forbids, and an outcome no order of the two calls gives.
type handOffAtRepeatableRead struct {
	impl.Store
	pool *pgxpool.Pool
}

func (s handOffAtRepeatableRead) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	l, ok := impl.AsLeasingEnqueuer(s.Store)
	if !ok {
		return nil, errors.New("handOffAtRepeatableRead: the store under it has no EnqueueLeased")
	}
	return l.EnqueueLeased(ctx, msgs)
}

func (s handOffAtRepeatableRead) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (impl.HandOffResult, error) {
	for {
		r, err := s.tryHandOff(ctx, w)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.SerializationFailure || pgErr.Code == pgerrcode.DeadlockDetected) && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		return r, err
	}
}

func (s handOffAtRepeatableRead) tryHandOff(ctx context.Context, w impl.HandOffWrite) (r impl.HandOffResult, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return r, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	subs, evs := make([]string, len(w.Ack)), make([]string, len(w.Ack))
	for i, k := range w.Ack {
		subs[i], evs[i] = k.Subscriber, k.EventID
	}
	tag, err := tx.Exec(ctx, `DELETE FROM messages m USING unnest($1::text[], $2::text[]) AS k(s, e)
WHERE m.subscriber = k.s AND m.event_id = k.e`, subs, evs)
	if err != nil {
		return r, err
	}
	r.Acked = int(tag.RowsAffected())
	if len(w.Enqueue) > 0 {
		r.Inserted = make([]bool, len(w.Enqueue))
	}
	for i, m := range w.Enqueue {
		created := impl.NanosOf(m.CreatedAt)
		err := tx.QueryRow(ctx, `INSERT INTO messages (subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at,
    next_attempt_at, lease_owner, lease_until)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10) ON CONFLICT (subscriber, event_id) DO NOTHING RETURNING true`,
			m.Subscriber, m.EventID, m.Stream, m.Pos.Major, m.Pos.Minor, m.Pos.ID, orNil(m.Payload), created,
			m.LeaseOwner, impl.NanosOf(m.LeaseUntil)).Scan(&r.Inserted[i])
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return r, err
		}
	}
	if len(w.Cursors) > 0 {
		r.Written = make([]bool, len(w.Cursors))
	}
	for i, c := range w.Cursors {
		err := tx.QueryRow(ctx, `INSERT INTO cursors AS c (stream, subscriber, pos_major, pos_minor, pos_id, token, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (stream, subscriber) DO UPDATE SET
    pos_major = EXCLUDED.pos_major, pos_minor = EXCLUDED.pos_minor, pos_id = EXCLUDED.pos_id,
    token = EXCLUDED.token, updated_at = EXCLUDED.updated_at
WHERE (c.pos_major, c.pos_minor, c.pos_id) < (EXCLUDED.pos_major, EXCLUDED.pos_minor, EXCLUDED.pos_id)
RETURNING true`, c.Key.Stream, c.Key.Subscriber, c.Pos.Major, c.Pos.Minor, c.Pos.ID, orNil(c.Token), impl.NanosOf(c.UpdatedAt)).Scan(&r.Written[i])
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return r, err
		}
	}
	return r, tx.Commit(ctx)
}

func orNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func (s handOffAtRepeatableRead) Close() error { s.pool.Close(); return s.Store.Close() }

// The hand-off at REPEATABLE READ passes the sequential groups and is
// caught by Linearizability/HandOff; make test runs it until caught, at
// most 3 times.
func TestPostgresPlantedHandOffSkewIsCaught(t *testing.T) {
	f := plantedPg(t, "race:hand-off-at-repeatable-read", "UTC", "repeatable read", func(st impl.Store, p *pgxpool.Pool) impl.Store {
		return handOffAtRepeatableRead{st, p}
	})
	f.Features.HandOff, f.Features.LeasedEnqueue = true, true
	seq, err := conformance.Certify([]conformance.Factory{f}, conformance.Only(conformance.GroupContract, conformance.GroupStateMachine), conformance.RapidChecks(30), conformance.ShrinkTime(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !seq.Passed {
		for _, r := range seq.Failures() {
			t.Errorf("%s: %s\n%.1500s", r.Name, r.Summary, r.Message)
		}
		t.Fatal("the planted hand-off must be right call by call (else it plants more than a race)")
	}
	requireCaught(t, f, "Linearizability/HandOff")
}

// Package pgstore is the PostgreSQL backend of the store contract
// (impl.Store), on pgx/v5 and pgxpool, with its schema in the top-level
// migrations folder applied by golang-migrate.
//
// Results equal the in-memory backend's exactly, so that one seed gives one
// trace on either:
//   - instants are BIGINT Unix nanoseconds from the caller's clock
//     (impl.NanosOf / impl.TimeOf), never now(), and read back in UTC;
//   - identifiers are text COLLATE "C", so ordering is bytewise like Go's;
//   - an empty token or payload is stored as NULL and reads back as nil;
//   - a list with no elements is returned as nil, never as an empty slice.
//
// The session time zone is left as the DSN or server sets it, not pinned:
// no statement reads it (no now(), no timestamp types or casts), so the
// results are the same under any; the conformance suite and deliverysim
// certify run under UTC and America/New_York to show it.
//
// PostgreSQL text cannot hold a NUL byte or invalid UTF-8; strings with
// either are refused with an error before anything is sent.
//
// Every method is one SERIALIZABLE transaction (a single statement, or one
// pipelined batch in one implicit transaction): one round trip, all or
// nothing, and the calls are linearizable. (A large Enqueue or
// EnqueueLeased first tries a COPY, which fails with no effect if a key is
// already present, and only then sends its INSERT; see copyIn.)
// Serialization failures and deadlocks roll back by definition and are
// retried inside the call for as long as its context lives (the contract
// lets no conflict through: impl.Store, "Errors"), as is, a bounded number
// of times, a call that found its pooled connection dead before sending
// anything. A write whose outcome is unknown — the
// connection died after the request left — returns an error wrapping
// impl.ErrAmbiguous; any other error means it took no effect.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverysim/deliverysim/impl"
)

// DefaultSchema is the schema Open uses when Options.Schema is empty.
const DefaultSchema = "deliverysim"

const (
	defaultConnectTimeout = 5 * time.Second
	cancelGrace           = 2 * time.Second
	// A call that failed before its request left (no connection from the
	// pool) is retried this many times at most: a closed pool or a server
	// that refuses us gives the same answer every time, and the caller
	// should hear it rather than wait on its context. Serialization
	// failures and deadlocks are not counted: see retry.
	maxNotSentTries = 30
)

// Options configure Open.
type Options struct {
	// Schema holds the tables; it is created if missing and set as the
	// search_path of every pooled connection. Default DefaultSchema.
	Schema string
	// Migrate applies the embedded migrations before the store is used.
	// Without it Open checks that the schema is exactly at LatestVersion.
	Migrate bool
	// MaxConns bounds the pool (0 = pgxpool's default).
	MaxConns int32
	// ApplicationName tags the sessions in pg_stat_activity
	// (default "deliverysim").
	ApplicationName string
}

// Store is the PostgreSQL impl.Store. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	// copyMinRows is the batch size from which Enqueue and EnqueueLeased
	// try COPY first (defaultCopyMinRows; tests lower it to 1 so that the
	// conformance suite's small batches take that path too).
	copyMinRows int
	// rangeMinKeys: from this many keys of one subscriber a hand-off's
	// ack deletes them by a guarded range scan (defaultRangeMinKeys).
	rangeMinKeys int
	// rangeAcked counts the rows acks deleted by a range delete (ack.go),
	// as the statements report them (an attempt rolled back counts too),
	// so that tests can tell which path a call took.
	rangeAcked atomic.Int64
}

var (
	_ impl.Store             = (*Store)(nil)
	_ impl.BlindCursorWriter = (*Store)(nil)
	_ impl.LeasingEnqueuer   = (*Store)(nil)
)

// Open connects to dsn, prepares the schema and returns a ready store. A
// server that cannot be reached gives a *ConnError with a one-line message.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.ApplicationName == "" {
		opts.ApplicationName = "deliverysim"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, DescribeConnError(dsn, err)
	}
	applyRuntime(&cfg.ConnConfig.Config, opts.Schema, opts.ApplicationName)
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// On a canceled context, ask the server to cancel the statement rather
	// than cutting the connection: the server then answers with an ERROR
	// (rolled back, a definite failure) instead of leaving the outcome
	// unknown, and the session survives. The deadline is the fallback for a
	// server that does not answer.
	cfg.ConnConfig.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pgConn, DeadlineDelay: cancelGrace}
	}
	cfg.AfterConnect = warmAllocator
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, DescribeConnError(dsn, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, DescribeConnError(dsn, err)
	}
	s := &Store{pool: pool, schema: opts.Schema, copyMinRows: defaultCopyMinRows, rangeMinKeys: defaultRangeMinKeys}
	if err := s.prepare(ctx, dsn, opts); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) prepare(ctx context.Context, dsn string, opts Options) error {
	if opts.Migrate {
		if err := Migrate(ctx, dsn, opts.Schema); err != nil {
			return err
		}
		// Sessions opened before the tables existed may hold plans that
		// no longer fit.
		s.pool.Reset()
		return nil
	}
	have, dirty, err := s.schemaVersion(ctx)
	if err != nil {
		return err
	}
	if latest := LatestVersion(); have != latest || dirty {
		return &VersionError{Schema: s.schema, Have: have, Know: latest, Dirty: dirty}
	}
	return nil
}

func (s *Store) schemaVersion(ctx context.Context) (uint, bool, error) {
	var v int64
	var dirty bool
	err := s.pool.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{s.schema, MigrationsTable}.Sanitize()+" LIMIT 1").Scan(&v, &dirty)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows),
		errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UndefinedTable || pgErr.Code == pgerrcode.InvalidSchemaName):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("pgstore: read schema version of %q: %w", s.schema, err)
	}
	return uint(v), dirty, nil
}

// Schema is the schema the store's tables live in.
func (s *Store) Schema() string { return s.schema }

// Close releases the pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// warmAllocator runs on every new pooled connection. The server process
// behind a connection allocates a few hundred KB for a batch statement (a
// COPY or DELETE of 1000 messages) and frees it at the end. glibc's malloc
// hands memory at the top of the heap back to the kernel once more than
// its trim threshold (128 KB at first) is free, so every such statement
// shrank the heap and grew it again: system calls, page faults and, on a
// virtual machine, TLB shootdowns that took 5-10% of the server's time in
// the replay benchmark, and made the next COPY a fifth slower. One 1 MB
// allocation freed early raises that threshold to 2 MB for the life of the
// process (glibc adapts its mmap threshold, and the trim threshold with
// it, to the largest mmap'd block freed), which ends the churn at the cost
// of up to 2 MB kept per connection. On a server built with another
// allocator it does nothing, and costs one statement per connection.
func warmAllocator(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, "SELECT length(repeat('x', 1048576))")
	return err
}

// querier is what a method runs its statements on: one pooled connection.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
	Conn() *pgx.Conn
}

// do runs fn on a pooled connection and classifies its error. It retries
// fn while the failure provably left nothing behind and may pass (see
// retry).
func (s *Store) do(ctx context.Context, op string, write bool, fn func(context.Context, querier) error) error {
	if err := retry(ctx, func() error { return s.attempt(ctx, fn) }, sleep); err != nil {
		return classify(op, write, err)
	}
	return nil
}

// retry calls try until it succeeds or fails in a way not worth another
// try. A serialization failure or a deadlock (lostARace) is retried for as
// long as ctx lives, however many tries that takes: it rolled back, and on
// a loaded machine the losing side of a hot key can lose for seconds, so a
// count or a fixed time would hand the caller an error the contract gives
// it no reason to expect (issue 38: a budget of 30 tries and 1 s ran out
// under load). Other failures worth retrying (the request never left) get
// maxNotSentTries. Between tries wait sleeps a jittered, growing pause;
// once ctx ends the last failure comes back joined with ctx's error
// (gaveUp), so the caller sees both why the call failed and why it
// stopped trying.
func retry(ctx context.Context, try func() error, wait func(context.Context, time.Duration) bool) error {
	for tries := 1; ; tries++ {
		err := try()
		switch {
		case err == nil:
			return nil
		case !worthRetrying(err), !lostARace(err) && tries >= maxNotSentTries:
			return err
		case ctx.Err() != nil:
			return &gaveUp{last: err, ctx: ctx.Err(), tries: tries}
		}
		// Give the transaction that won the conflict time to commit, or
		// the same two collide again.
		if !wait(ctx, backoff(tries)) {
			return &gaveUp{last: err, ctx: ctx.Err(), tries: tries}
		}
	}
}

// gaveUp is a retried failure that was still failing when the caller's
// context ended. It unwraps to both errors: classify still finds the
// database's answer (a rollback is not ambiguous), and errors.Is finds
// context.Canceled or DeadlineExceeded.
type gaveUp struct {
	last  error
	ctx   error
	tries int
}

func (e *gaveUp) Error() string {
	return fmt.Sprintf("%v (gave up after %d tries: %v)", e.last, e.tries, e.ctx)
}

func (e *gaveUp) Unwrap() []error { return []error{e.last, e.ctx} }

// sleep waits d, or less if ctx ends first; it reports whether ctx is
// still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// The pause before the next try: exponential from backoffBase, capped at
// backoffCap, with full jitter so that the clients that collided do not
// collide again in step. The cap keeps a long losing streak responsive:
// one commit of the winner takes well under it.
const (
	backoffBase = 500 * time.Microsecond
	backoffCap  = 50 * time.Millisecond
)

// backoff is the pause after the tries-th failed try: uniform in
// (0, min(backoffCap, backoffBase * 2^(tries-1))]. Jitter needs no
// reproducible stream here (pgstore's timing is real, not simulated), so
// the top-level generator serves.
func backoff(tries int) time.Duration {
	ceiling := backoffCap
	if tries <= 20 { // past 2^20 the shift would only be capped anyway
		ceiling = min(backoffCap, backoffBase<<(tries-1))
	}
	return time.Duration(rand.Int64N(int64(ceiling))) + 1
}

// queryOne runs a statement that returns at most one row, through do; no
// row gives found false and no error.
func queryOne[T any](ctx context.Context, s *Store, op string, write bool, scan func(pgx.Row) (T, error), sql string, args ...any) (v T, found bool, err error) {
	err = s.do(ctx, op, write, func(ctx context.Context, q querier) error {
		var err error
		v, err = scan(q.QueryRow(ctx, sql, args...))
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil || !found {
		var zero T
		return zero, false, err
	}
	return v, true, nil
}

// queryAll runs a statement through do and scans every row; no rows gives
// nil, as the package promises.
func queryAll[T any](ctx context.Context, s *Store, op string, write bool, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	var out []T
	err := s.do(ctx, op, write, func(ctx context.Context, q querier) error {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
		return err
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return out, nil
}

func (s *Store) attempt(ctx context.Context, fn func(context.Context, querier) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return notSent{err}
	}
	defer conn.Release()
	return fn(ctx, conn)
}

// notSent marks a failure that happened before a request left: getting a
// connection from the pool.
type notSent struct{ err error }

func (e notSent) Error() string     { return e.err.Error() }
func (e notSent) Unwrap() error     { return e.err }
func (e notSent) SafeToRetry() bool { return true }

// lostARace says whether err is a serialization failure or a deadlock:
// the only failures retried for as long as the caller's context lives (a
// closed pool or a dead server is not worth that).
func lostARace(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && isStatementError(pgErr) &&
		(pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

func worthRetrying(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && isStatementError(pgErr) {
		return lostARace(err)
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return false // the server is down or refusing us: retrying only delays the error
	}
	return nothingExecuted(err)
}

// nothingExecuted is true when err proves that no statement ran: nothing
// was sent, or a batch failed while being prepared (pgx prepares a batch's
// statements in a round trip of its own, before it sends any to execute).
func nothingExecuted(err error) bool {
	var prep pgx.ErrPreprocessingBatch
	return pgconn.SafeToRetry(err) || errors.As(err, &prep)
}

// classify wraps err for the caller. A write is definitely not applied when
// nothing was executed, when no connection was made, or when the server
// answered with a statement error (the implicit transaction rolled back).
// Anything else after the request left — a dead connection, a FATAL from a
// terminated backend, a deadline that cut the connection — may have reached
// the server's COMMIT, so it wraps impl.ErrAmbiguous.
func classify(op string, write bool, err error) error {
	if !write || errors.Is(err, impl.ErrAmbiguous) || definitelyNotApplied(err) {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return fmt.Errorf("pgstore: %s: %w: %w", op, impl.ErrAmbiguous, err)
}

func definitelyNotApplied(err error) bool {
	if nothingExecuted(err) || errors.Is(err, errInvalidText) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && isStatementError(pgErr)
}

// isStatementError is true for an ERROR (the statement failed and its
// transaction rolled back) as opposed to FATAL or PANIC (the session died,
// possibly after committing).
func isStatementError(pgErr *pgconn.PgError) bool {
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	return sev == "ERROR"
}

var errInvalidText = errors.New("PostgreSQL text cannot hold a NUL byte or invalid UTF-8")

// checkText refuses strings PostgreSQL would reject, before anything is
// sent, so the error is definite and says which field is at fault.
func checkText(field string, vals ...string) error {
	for _, v := range vals {
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return fmt.Errorf("%s %q: %w", field, v, errInvalidText)
		}
	}
	return nil
}

// nilIfEmpty stores empty and nil byte slices alike (as NULL), so both read
// back as nil, as from every backend.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// Package pgtest gives tests a PostgreSQL to run against, each test in its
// own schema.
//
// Where the server comes from, in order:
//  1. DELIVERYSIM_PG_DSN, if set. If it is set but unreachable the test
//     fails: a DSN someone configured and that does not work is a mistake,
//     not a reason to skip.
//  2. A throwaway container (testcontainers-go), if a Docker engine answers.
//     One container serves the whole test binary; the testcontainers reaper
//     removes it when the binary exits.
//  3. Otherwise the test is skipped with a note on how to provide one —
//     unless DELIVERYSIM_REQUIRE_PG=1, which turns that skip into a failure
//     (CI sets it so a missing server cannot pass silently).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgschema"
)

const (
	// EnvDSN names the server to test against.
	EnvDSN = "DELIVERYSIM_PG_DSN"
	// EnvRequire = "1" makes a missing server a test failure.
	EnvRequire = "DELIVERYSIM_REQUIRE_PG"

	exampleDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	image      = "postgres:16-alpine"
)

type source struct {
	dsn  string
	err  error  // set: fail the test with this
	skip string // set: skip (or fail, under EnvRequire) with this
}

var (
	resolveOnce sync.Once
	resolved    source
)

// DSN returns a reachable PostgreSQL DSN or ends the test (skip or fail, see
// the package comment). The answer is worked out once per test binary.
func DSN(t testing.TB) string {
	t.Helper()
	resolveOnce.Do(func() { resolved = resolve() })
	switch {
	case resolved.err != nil:
		t.Fatal(resolved.err)
	case resolved.skip != "" && os.Getenv(EnvRequire) == "1":
		t.Fatalf("%s=1 but %s", EnvRequire, resolved.skip)
	case resolved.skip != "":
		t.Skip(resolved.skip)
	}
	return resolved.dsn
}

func resolve() source {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		if err := ping(dsn); err != nil {
			return source{err: pgstore.DescribeConnError(dsn, err)}
		}
		collectLeftovers(dsn)
		return source{dsn: dsn}
	}
	if why := dockerUnavailable(); why != "" {
		return source{skip: fmt.Sprintf("no PostgreSQL for this test: %s is unset and %s; set %s=%s (or start Docker)", EnvDSN, why, EnvDSN, exampleDSN)}
	}
	dsn, err := startContainer()
	if err != nil {
		return source{err: fmt.Errorf("a Docker engine answers but the %s container did not start: %w (or set %s=%s)", image, err, EnvDSN, exampleDSN)}
	}
	return source{dsn: dsn}
}

func ping(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// dockerUnavailable asks the testcontainers provider whether an engine
// answers. It returns "" if one does, else why not. The provider panics on
// some broken setups, which must mean "no Docker", not a crashed test.
func dockerUnavailable() (why string) {
	defer func() {
		if r := recover(); r != nil {
			why = fmt.Sprintf("the Docker probe panicked (%v)", r)
		}
	}()
	quiet := testcontainers.WithLogger(tclog.NewNoopLogger())
	provider, err := testcontainers.ProviderDefault.GetProvider(quiet)
	if err != nil {
		return "no Docker engine answers"
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := provider.Health(ctx); err != nil {
		return "no Docker engine answers"
	}
	return ""
}

func startContainer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctr, err := postgres.Run(ctx, image,
		postgres.WithDatabase("deliverysim"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		postgres.BasicWaitStrategies(),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return "", err
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return "", err
	}
	return dsn, nil
}

// NewSchema creates an empty schema with a name unique to this test (and
// this process, and this moment), drops it with everything in it when the
// test ends, and returns the DSN and the schema name. For tests that need
// raw access: migrations, catalog checks, killing sessions.
func NewSchema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = DSN(t)
	schema, err := createSchema(t, dsn, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return dsn, schema
}

// createSchema makes the schema and hands its dropping to owner's cleanup.
func createSchema(owner testing.TB, dsn, name string) (string, error) {
	schema := uniqueName(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", pgstore.DescribeConnError(dsn, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create schema %s: %w", schema, err)
	}
	owner.Cleanup(func() {
		if err := pgstore.DropSchema(context.Background(), dsn, schema); err != nil {
			owner.Errorf("pgtest: %v", err)
		}
	})
	return schema, nil
}

// uniqueName builds a schema name carrying the project prefix, its creation
// time and the test name (readable in psql when something is left behind;
// deliverysim gc removes such leftovers).
func uniqueName(testName string) string {
	return pgschema.Name(pgschema.KindTest, testName, time.Now())
}

// gcOlderThan: at start-up a test binary drops test schemas this old,
// left by binaries that were killed before their cleanups ran. Younger
// ones may belong to a binary running beside this one.
const gcOlderThan = time.Hour

func collectLeftovers(dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = pgschema.GC(ctx, dsn, pgschema.GCOptions{Prefix: pgschema.Prefix + pgschema.KindTest + "_", OlderThan: gcOlderThan, Now: time.Now()})
}

// NewStore returns a migrated store in a fresh schema of its own, closed and
// dropped when the test ends.
func NewStore(t testing.TB) *pgstore.Store {
	t.Helper()
	dsn, schema := NewSchema(t)
	return OpenStore(t, dsn, schema, pgstore.Options{})
}

// OpenStore opens (and migrates) a store on schema, closed when the test
// ends. Schema and Migrate in opts are set by it.
func OpenStore(t testing.TB, dsn, schema string, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Schema, opts.Migrate = schema, true
	s, err := pgstore.Open(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("pgtest: open store in schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Stores hands out empty migrated stores and recycles their schemas: a
// store given back (at the cleanup of the t it was handed to) is emptied
// and handed out again. Property tests ask for a fresh store per generated
// sequence — hundreds per test — and creating and migrating a schema each
// time would dominate their run time. The schemas belong to the t given to
// NewStores and are dropped when it ends.
type Stores struct {
	owner testing.TB
	dsn   string
	mu    sync.Mutex
	free  []*pgstore.Store
	admin *pgx.Conn
}

// NewStores returns a recycler whose schemas live as long as t.
func NewStores(t testing.TB) *Stores {
	t.Helper()
	return newStores(t, DSN(t))
}

// NewStoresTZ is NewStores with every session in time zone zone (the
// DSN's "timezone" run-time parameter; see pgcert).
func NewStoresTZ(t testing.TB, zone string) *Stores {
	t.Helper()
	dsn, err := pgcert.WithTimeZone(DSN(t), zone)
	if err != nil {
		t.Fatal(err)
	}
	return newStores(t, dsn)
}

// DSN is the DSN the recycler's stores connect with.
func (p *Stores) DSN() string { return p.dsn }

func newStores(t testing.TB, dsn string) *Stores {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(pgstore.DescribeConnError(dsn, err))
	}
	p := &Stores{owner: t, dsn: dsn, admin: admin}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	return p
}

// New returns an empty store for t; at t's cleanup the store is emptied and
// kept for the next caller (a store that cannot be emptied is dropped).
func (p *Stores) New(t testing.TB) *pgstore.Store {
	t.Helper()
	p.mu.Lock()
	var s *pgstore.Store
	if n := len(p.free); n > 0 {
		s, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if s == nil {
		// The schema outlives t: it belongs to the owner, and t only
		// borrows it. Failures are t's, though: it is the one running.
		schema, err := createSchema(p.owner, p.dsn, p.owner.Name())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err = pgstore.Open(ctx, p.dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 8})
		if err != nil {
			t.Fatalf("pgtest: open store in schema %s: %v", schema, err)
		}
		p.owner.Cleanup(func() { _ = s.Close() })
	}
	t.Cleanup(func() { p.recycle(s) })
	return s
}

func (p *Stores) recycle(s *pgstore.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A test may have closed the store (the suite's ClosedStoreRefuses
	// does): its pool is gone, so it cannot serve the next caller.
	if _, err := s.ListCursors(ctx); err != nil {
		p.owner.Logf("pgtest: store in schema %s no longer answers, not reusing it: %v", s.Schema(), err)
		return
	}
	var sql strings.Builder
	for _, table := range []string{"cursors", "messages", "delivered", "dedup"} {
		fmt.Fprintf(&sql, "DELETE FROM %s;", pgx.Identifier{s.Schema(), table}.Sanitize())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.admin.Exec(ctx, sql.String()); err != nil {
		p.owner.Logf("pgtest: emptying schema %s failed, not reusing it: %v", s.Schema(), err)
		return
	}
	p.free = append(p.free, s)
}

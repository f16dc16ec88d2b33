package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/deliverysim/deliverysim/migrations"
)

// MigrationsTable is where golang-migrate records the schema version, inside
// the store's schema.
const MigrationsTable = "schema_migrations"

// ErrSchemaTooNew is wrapped by the error returned when the database was
// migrated by a newer deliverysim than this one.
var ErrSchemaTooNew = errors.New("database schema is newer than this build")

// ErrSchemaNotMigrated is wrapped by Open's error when Options.Migrate is off
// and the schema is missing migrations.
var ErrSchemaNotMigrated = errors.New("database schema is not migrated")

// VersionError reports a schema version this build cannot work with.
type VersionError struct {
	Schema string
	Have   uint // version found in the database (0 = none)
	Know   uint // newest version this build ships
	Dirty  bool // a migration failed halfway
}

func (e *VersionError) Error() string {
	switch {
	case e.Dirty:
		return fmt.Sprintf("database schema %q is dirty at version %d (a migration failed halfway): repair it by hand, then set %s.dirty = false", e.Schema, e.Have, MigrationsTable)
	case e.Have > e.Know:
		return fmt.Sprintf("database schema %q is at version %d but this build knows up to %d; upgrade deliverysim", e.Schema, e.Have, e.Know)
	default:
		return fmt.Sprintf("database schema %q is at version %d but this build needs %d: run the migrations (pgstore.Options.Migrate or `deliverysim migrate`)", e.Schema, e.Have, e.Know)
	}
}

func (e *VersionError) Unwrap() error {
	if e.Have > e.Know {
		return ErrSchemaTooNew
	}
	if !e.Dirty {
		return ErrSchemaNotMigrated
	}
	return nil
}

var migrationName = regexp.MustCompile(`^([0-9]+)_.*\.(up|down)\.sql$`)

// LatestVersion is the newest migration version embedded in this build.
func LatestVersion() uint { return latestVersion() }

// The embedded files never change, so they are read once.
var latestVersion = sync.OnceValue(func() uint {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		panic(fmt.Sprintf("pgstore: embedded migrations unreadable: %v", err))
	}
	var latest uint
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			panic(fmt.Sprintf("pgstore: bad migration file name %q", e.Name()))
		}
		latest = max(latest, uint(v))
	}
	return latest
})

// Migrate brings schema (created if missing) up to LatestVersion. It is safe
// to run concurrently (golang-migrate holds an advisory lock per schema) and
// a second run is a no-op. A database already at a newer version than this
// build knows gets a *VersionError wrapping ErrSchemaTooNew. A version left
// dirty by a migrator that died mid-migration is repaired (repairDirty):
// a SIGKILL during start-up must not brick the schema.
func Migrate(ctx context.Context, dsn, schema string) error {
	return withMigrator(ctx, dsn, schema, true, func(m *migrate.Migrate, _ *pgx.Conn) error {
		if err := repairDirty(m, schema); err != nil {
			return err
		}
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			// Someone newer may have migrated between the check and Up; that is
			// the error worth showing, not "no migration found for version N".
			if verr := checkVersion(m, schema); verr != nil {
				return verr
			}
			return fmt.Errorf("pgstore: migrate schema %q up: %w", schema, err)
		}
		return nil
	})
}

// MigrateDown reverts every migration in schema and then drops the version
// table too, so the schema is left as empty as before the first Migrate. The
// schema itself is kept: it may hold things that are not ours.
func MigrateDown(ctx context.Context, dsn, schema string) error {
	return withMigrator(ctx, dsn, schema, false, func(m *migrate.Migrate, conn *pgx.Conn) error {
		if err := m.Down(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("pgstore: migrate schema %q down: %w", schema, err)
		}
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{schema, MigrationsTable}.Sanitize()); err != nil {
			return fmt.Errorf("pgstore: drop %s in schema %q: %w", MigrationsTable, schema, err)
		}
		return nil
	})
}

// withMigrator runs fn with a migrator for schema (created if missing),
// holding the migration lock, once the schema's version is one this build
// can work with. conn is the session that holds the lock, for fn's own
// statements.
//
// The lock is ours because golang-migrate locks only around applying
// migrations; the version check runs before that, and without this lock it
// could read the dirty flag that a concurrent migrator sets while it is
// mid-migration, and refuse a schema that is merely being migrated (seen in
// TestPostgresMigrationsConcurrentUp).
func withMigrator(ctx context.Context, dsn, schema string, repair bool, fn func(*migrate.Migrate, *pgx.Conn) error) error {
	conn, err := connect(ctx, dsn, schema) // search_path may name a schema not yet created; that is fine
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	const key = "SELECT hashtextextended('deliverysim-migrate:' || $1, 0)"
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(("+key+"))", schema); err != nil {
		return fmt.Errorf("pgstore: lock schema %q for migration: %w", schema, err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(("+key+"))", schema) //nolint:errcheck // closing the session releases it anyway
	if err := createSchema(ctx, conn, schema); err != nil {
		return err
	}
	m, err := newMigrator(dsn, schema)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkVersion(m, schema); err != nil {
		var verr *VersionError
		// Migrate repairs a dirty version (see repairDirty); nothing else does.
		if !errors.As(err, &verr) || !verr.Dirty || verr.Have > verr.Know || !repair {
			return err
		}
	}
	return fn(m, conn)
}

// repairDirty settles a dirty version left by a migrator that died (a
// SIGKILL or a cut connection) between marking version V dirty and
// clearing the mark. golang-migrate runs each migration file as one
// simple-protocol query, which Postgres executes as one implicit
// transaction (TestMigrationFilesAreAtomic keeps the files free of
// statements that would break that), so V either committed whole or left
// no trace. Re-running V from the version before it tells which: it
// applies (V had rolled back) or fails on an object V creates (V had
// committed, and only the mark is stale). Any other failure is V's own
// and is returned. The caller holds the schema's migration lock, so no
// live migrator is behind the mark.
func repairDirty(m *migrate.Migrate, schema string) error {
	v, dirty, err := m.Version()
	if err != nil || !dirty {
		return nil // no version yet, or clean; checkVersion said the rest
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("pgstore: read embedded migrations: %w", err)
	}
	defer src.Close()
	prev := -1 // database.NilVersion: V is the first migration
	if p, err := src.Prev(v); err == nil {
		prev = int(p)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgstore: schema %q dirty at version %d: find the version before it: %w", schema, v, err)
	}
	if err := m.Force(prev); err != nil {
		return fmt.Errorf("pgstore: schema %q dirty at version %d: reset to %d: %w", schema, v, prev, err)
	}
	err = m.Steps(1)
	if err == nil {
		return nil
	}
	// golang-migrate's database.Error has no Unwrap; its OrigErr does.
	cause := err
	var dbErr database.Error
	if errors.As(err, &dbErr) {
		cause = dbErr.OrigErr
	}
	var pgErr *pgconn.PgError
	if errors.As(cause, &pgErr) && alreadyExists(pgErr.Code) {
		if ferr := m.Force(int(v)); ferr != nil {
			return fmt.Errorf("pgstore: schema %q dirty at version %d, which had committed: clear the mark: %w", schema, v, ferr)
		}
		return nil
	}
	return fmt.Errorf("pgstore: schema %q was dirty at version %d; re-running that migration failed: %w", schema, v, err)
}

// alreadyExists says a DDL statement found its object already there.
func alreadyExists(code string) bool {
	switch code {
	case pgerrcode.DuplicateTable, pgerrcode.DuplicateObject, pgerrcode.DuplicateColumn,
		pgerrcode.DuplicateSchema, pgerrcode.DuplicateFunction, pgerrcode.DuplicateAlias:
		return true
	}
	return false
}

// checkVersion refuses a dirty schema or one newer than this build.
func checkVersion(m *migrate.Migrate, schema string) error {
	v, dirty, err := m.Version()
	if errors.Is(err, migrate.ErrNilVersion) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgstore: read schema version of %q: %w", schema, err)
	}
	latest := LatestVersion()
	if v > latest || dirty {
		return &VersionError{Schema: schema, Have: v, Know: latest, Dirty: dirty}
	}
	return nil
}

func newMigrator(dsn, schema string) (*migrate.Migrate, error) {
	cfg, err := connConfig(dsn, schema, "deliverysim-migrate")
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{SchemaName: schema, MigrationsTable: MigrationsTable})
	if err != nil {
		db.Close()
		return nil, DescribeConnError(dsn, fmt.Errorf("pgstore: open migration driver: %w", err))
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("pgstore: read embedded migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		src.Close()
		drv.Close()
		return nil, fmt.Errorf("pgstore: start migrations: %w", err)
	}
	return m, nil
}

// connConfig parses dsn and points every session at schema: unqualified
// names in the migrations and the store's queries then resolve there.
func connConfig(dsn, schema, appName string) (*pgx.ConnConfig, error) {
	if schema == "" {
		return nil, errors.New("pgstore: empty schema name")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, DescribeConnError(dsn, err)
	}
	applyRuntime(&cfg.Config, schema, appName)
	return cfg, nil
}

func applyRuntime(cfg *pgconn.Config, schema, appName string) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	// Weaker levels let concurrent calls interleave in ways no order of
	// whole calls explains (RecordDelivered's delete and insert both miss
	// a concurrent writer's rows, a trim counts a queue that changed under
	// it); see the package comment.
	cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	if appName != "" {
		cfg.RuntimeParams["application_name"] = appName
	}
	if cfg.ConnectTimeout == 0 {
		// Without a bound a black-holed host hangs Open for minutes.
		cfg.ConnectTimeout = defaultConnectTimeout
	}
}

func connect(ctx context.Context, dsn, schema string) (*pgx.Conn, error) {
	cfg, err := connConfig(dsn, schema, "deliverysim-migrate")
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, DescribeConnError(dsn, err)
	}
	return conn, nil
}

func createSchema(ctx context.Context, conn *pgx.Conn, schema string) error {
	_, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	var pgErr *pgconn.PgError
	// IF NOT EXISTS still races with a concurrent creator: the loser gets a
	// unique violation on pg_namespace, and the schema exists all the same.
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UniqueViolation || pgErr.Code == pgerrcode.DuplicateSchema) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgstore: create schema %q: %w", schema, err)
	}
	return nil
}

// DropSchema removes schema and everything in it: the clean-up for the
// throwaway schemas that tests, simulator runs and benchmarks work in.
func DropSchema(ctx context.Context, dsn, schema string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return DescribeConnError(dsn, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("pgstore: drop schema %s: %w", schema, err)
	}
	return nil
}

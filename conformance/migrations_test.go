package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// pgCatalog lists every object PostgreSQL keeps in schema: relations (tables,
// indexes, sequences, views), types (each table brings a row type and an
// array type), functions and constraints.
func pgCatalog(t *testing.T, dsn, schema string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(pgstore.DescribeConnError(dsn, err))
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
		SELECT 'relation ' || relkind::text || ' ' || relname FROM pg_class WHERE relnamespace = (SELECT oid FROM ns)
		UNION ALL SELECT 'type ' || typname FROM pg_type WHERE typnamespace = (SELECT oid FROM ns)
		UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = (SELECT oid FROM ns)
		UNION ALL SELECT 'constraint ' || conname FROM pg_constraint WHERE connamespace = (SELECT oid FROM ns)
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func pgSchemaVersion(t *testing.T, dsn, schema string) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int64
	var dirty bool
	if err := conn.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{schema, pgstore.MigrationsTable}.Sanitize()).Scan(&v, &dirty); err != nil {
		t.Fatalf("read schema version: %v", err)
	}
	return v, dirty
}

func pgExec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestPostgresMigrationsUpDownLeaveNoTrace(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	empty := pgCatalog(t, dsn, schema)
	if len(empty) != 0 {
		t.Fatalf("a fresh schema is not empty: %v", empty)
	}
	var migrated []string
	for round := 1; round <= 2; round++ {
		if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		up := pgCatalog(t, dsn, schema)
		for _, want := range []string{"relation r cursors", "relation r messages", "relation r delivered", "relation r dedup", "relation r " + pgstore.MigrationsTable} {
			if !slices.Contains(up, want) {
				t.Errorf("round %d: after up the schema lacks %q; it has %v", round, want, up)
			}
		}
		if v, dirty := pgSchemaVersion(t, dsn, schema); v != int64(pgstore.LatestVersion()) || dirty {
			t.Errorf("round %d: version after up = %d (dirty %v), want %d", round, v, dirty, pgstore.LatestVersion())
		}
		if round == 1 {
			migrated = up
		} else if !slices.Equal(up, migrated) {
			t.Errorf("the second up built a different schema:\nfirst  %v\nsecond %v", migrated, up)
		}
		if err := pgstore.MigrateDown(ctx, dsn, schema); err != nil {
			t.Fatalf("round %d down: %v", round, err)
		}
		if left := pgCatalog(t, dsn, schema); len(left) != 0 {
			t.Errorf("round %d: down left objects behind: %v", round, left)
		}
	}
}

func TestPostgresMigrationsTwiceUpIsNoOp(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStore(t, dsn, schema, pgstore.Options{})
	c := impl.Cursor{Key: impl.CursorKey{Stream: "s"}, Pos: impl.Position{Major: 3}, Token: []byte("cookie")}
	if _, err := s.AdvanceCursors(ctx, []impl.Cursor{c}); err != nil {
		t.Fatal(err)
	}
	before := pgCatalog(t, dsn, schema)
	if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
		t.Fatalf("second up: %v", err)
	}
	// And once more through Open, which is how a restarted engine gets there.
	s2 := pgtest.OpenStore(t, dsn, schema, pgstore.Options{})
	if after := pgCatalog(t, dsn, schema); !slices.Equal(before, after) {
		t.Errorf("a second up changed the schema:\nbefore %v\nafter  %v", before, after)
	}
	got, ok, err := s2.GetCursor(ctx, c.Key)
	if err != nil || !ok || got.Pos != c.Pos || string(got.Token) != "cookie" {
		t.Errorf("data after a second up: %+v %v %v, want %+v", got, ok, err, c)
	}
}

// Several engine nodes start at once against an empty database: the
// advisory lock must serialise them and every one must succeed.
func TestPostgresMigrationsConcurrentUp(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	pgExec(t, dsn, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()) // CREATE SCHEMA races too
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgstore.Migrate(ctx, dsn, schema) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	if v, dirty := pgSchemaVersion(t, dsn, schema); v != int64(pgstore.LatestVersion()) || dirty {
		t.Errorf("version = %d (dirty %v), want %d", v, dirty, pgstore.LatestVersion())
	}
}

func TestPostgresMigrationsNewerDatabaseIsRefused(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
		t.Fatal(err)
	}
	newer := pgstore.LatestVersion() + 5
	pgExec(t, dsn, "UPDATE "+pgx.Identifier{schema, pgstore.MigrationsTable}.Sanitize()+" SET version = $1", int64(newer))
	before := pgCatalog(t, dsn, schema)

	want := fmt.Sprintf("is at version %d but this build knows up to %d; upgrade deliverysim", newer, pgstore.LatestVersion())
	checkErr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, pgstore.ErrSchemaTooNew) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s on a newer schema: got %v, want one line containing %q", what, err, want)
		}
	}
	checkErr("Migrate", pgstore.Migrate(ctx, dsn, schema))
	checkErr("MigrateDown", pgstore.MigrateDown(ctx, dsn, schema))
	_, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true})
	checkErr("Open with Migrate", err)
	_, err = pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema})
	checkErr("Open", err)

	if after := pgCatalog(t, dsn, schema); !slices.Equal(before, after) {
		t.Errorf("refusing a newer schema still changed it:\nbefore %v\nafter  %v", before, after)
	}
	if v, _ := pgSchemaVersion(t, dsn, schema); v != int64(newer) {
		t.Errorf("version = %d after the refusals, want %d untouched", v, newer)
	}
}

// TestPostgresMigrationsDirtyIsRepaired: a migrator SIGKILLed or cut off
// between marking a version dirty and clearing the mark leaves a dirty
// version (the chaos harness did this to serve at start-up, and every
// restart then refused the schema). Migrate settles both cases, the
// migration having committed or not, and ends at the latest version, clean,
// with the same catalog as a plain migration.
func TestPostgresMigrationsDirtyIsRepaired(t *testing.T) {
	ctx := context.Background()
	ref, refSchema := pgtest.NewSchema(t)
	if err := pgstore.Migrate(ctx, ref, refSchema); err != nil {
		t.Fatal(err)
	}
	want := pgCatalog(t, ref, refSchema)
	latest := int64(pgstore.LatestVersion())
	version := func(schema string) string { return pgx.Identifier{schema, pgstore.MigrationsTable}.Sanitize() }

	cases := map[string]func(t *testing.T, dsn, schema string){
		// The last migration committed; only the mark is stale.
		"committed": func(t *testing.T, dsn, schema string) {
			if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
				t.Fatal(err)
			}
			pgExec(t, dsn, "UPDATE "+version(schema)+" SET dirty = true")
		},
		// The last migration (000003_retention_drops) rolled back: its
		// table is missing.
		"rolled back": func(t *testing.T, dsn, schema string) {
			if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
				t.Fatal(err)
			}
			pgExec(t, dsn, "DROP TABLE "+pgx.Identifier{schema, "retention_drops"}.Sanitize())
			pgExec(t, dsn, "UPDATE "+version(schema)+" SET dirty = true")
		},
		// The first migration rolled back: nothing but the mark exists.
		"first rolled back": func(t *testing.T, dsn, schema string) {
			pgExec(t, dsn, "CREATE TABLE "+version(schema)+" (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)")
			pgExec(t, dsn, "INSERT INTO "+version(schema)+" VALUES (1, true)")
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dsn, schema := pgtest.NewSchema(t)
			setup(t, dsn, schema)
			if _, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema}); err == nil || !strings.Contains(err.Error(), "dirty") {
				t.Errorf("Open without Migrate on a dirty schema: got %v, want a refusal that says it is dirty", err)
			}
			if err := pgstore.Migrate(ctx, dsn, schema); err != nil {
				t.Fatalf("Migrate on a dirty schema: %v", err)
			}
			if v, dirty := pgSchemaVersion(t, dsn, schema); v != latest || dirty {
				t.Errorf("version %d dirty %v after the repair; want %d clean", v, dirty, latest)
			}
			if got := pgCatalog(t, dsn, schema); !slices.Equal(got, want) {
				t.Errorf("catalog after the repair differs from a plain migration:\ngot  %v\nwant %v", got, want)
			}
		})
	}
}

// Package pgcert certifies PostgreSQL-backed stores: it turns a function
// that opens a store in a given schema into conformance Factories that
// give every check a schema of its own (created empty, dropped when the
// check ends), one Factory per session time zone.
//
// A store that reads or writes times through the session's time zone
// (timestamp without time zone, now(), a string cast to timestamptz)
// behaves the same as a correct one on a UTC server and goes wrong
// elsewhere; running the suite under UTC and under a zone with an offset
// and daylight-saving changes shows which one a store is. Each DSN gets
// its zone as the "timezone" run-time parameter, which libpq-style
// drivers (pgx, lib/pq) send at connect; a store that pins its own
// TimeZone overrides it, and the report shows the zone its sessions got.
package pgcert

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/internal/pgschema"
)

// TimeZones are the session time zones Factories certifies under by
// default: UTC, and one with an offset from it and daylight-saving
// changes.
var TimeZones = []string{"UTC", "America/New_York"}

// Opener opens the store under test on dsn, in schema: the schema exists
// and is empty; the store creates its tables there (or its migrations do).
// The store's Close is called when the check ends, then the schema is
// dropped.
type Opener func(ctx context.Context, dsn, schema string) (impl.Store, error)

// Factories returns one Factory per time zone (TimeZones when none are
// given), each named name with Variant "TimeZone=<zone>". Describe reports
// the server's version, the session's time zone and its default isolation
// level; Certify calls it first, so an unreachable server stops the run
// with one line instead of failing every check.
func Factories(name, dsn string, open Opener, features conformance.Features, zones ...string) []conformance.Factory {
	if len(zones) == 0 {
		zones = TimeZones
	}
	out := make([]conformance.Factory, 0, len(zones))
	for _, zone := range zones {
		zdsn, err := WithTimeZone(dsn, zone)
		out = append(out, conformance.Factory{
			Name:     name,
			Variant:  "TimeZone=" + zone,
			Features: features,
			New: func(t testing.TB) impl.Store {
				if err != nil {
					t.Fatal(err)
				}
				return newStore(t, zdsn, open)
			},
			Describe: func(ctx context.Context) (conformance.Server, error) {
				if err != nil {
					return conformance.Server{}, err
				}
				return Describe(ctx, zdsn)
			},
		})
	}
	return out
}

// WithTimeZone returns dsn (URL or keyword/value form) with its session
// time zone set to zone, replacing any the DSN had.
func WithTimeZone(dsn, zone string) (string, error) {
	if _, err := time.LoadLocation(zone); err != nil && zone != "UTC" {
		return "", fmt.Errorf("pgcert: unknown time zone %q: %w", zone, err)
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("pgcert: DSN is not a valid URL: %w", err)
		}
		q := u.Query()
		for k := range q {
			if strings.EqualFold(k, "timezone") {
				q.Del(k)
			}
		}
		q.Set("timezone", zone)
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// Keyword/value: a later setting of a key wins.
	return strings.TrimSpace(dsn + " timezone='" + strings.ReplaceAll(zone, "'", `\'`) + "'"), nil
}

// Describe connects to dsn as a store's session would and reports the
// server version, the session time zone and the default transaction
// isolation level.
func Describe(ctx context.Context, dsn string) (conformance.Server, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return conformance.Server{}, fmt.Errorf("cannot reach PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s conformance.Server
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('TimeZone'), current_setting('default_transaction_isolation')`).
		Scan(&s.Version, &s.TimeZone, &s.DefaultIsolation)
	if err != nil {
		return conformance.Server{}, fmt.Errorf("reading the server's settings: %w", err)
	}
	return s, nil
}

// newStore creates a fresh schema, opens the store in it, and registers
// closing the store and dropping the schema with t.
func newStore(t testing.TB, dsn string, open Opener) impl.Store {
	// The check's context: a certification stopped by a signal ends it,
	// so no schema is made or migrated for a check nobody waits for.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	schema := pgschema.Name(pgschema.KindCert, "", time.Now())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgcert: connect: %v", err)
	}
	// Once sent, the CREATE is not cut short by that context: cancelled
	// in flight, it can commit on the server while the call reports the
	// cancellation (a stopped run left such a schema behind). The drop
	// is registered whatever the answer; DROP SCHEMA IF EXISTS of a
	// schema never made does nothing.
	createCtx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	_, err = conn.Exec(createCtx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	_ = conn.Close(createCtx)
	cancelCreate()
	t.Cleanup(func() {
		if err := dropSchema(dsn, schema); err != nil {
			t.Errorf("pgcert: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("pgcert: create schema %s: %v", schema, err)
	}
	s, err := open(ctx, dsn, schema)
	if err != nil {
		t.Fatalf("pgcert: open the store in schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dropSchema(dsn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("drop schema %s: connect: %w", schema, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

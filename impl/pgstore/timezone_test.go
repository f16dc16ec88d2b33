package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// pgstore does not pin its sessions' time zone: it never reads it (every
// instant is BIGINT nanoseconds from the caller's clock). The conformance
// suite runs under UTC and America/New_York to show that; this shows the
// second run is not vacuous: the zone a DSN asks for is the zone
// pgstore's pooled sessions get, and instants still read back exactly.
func TestSessionTimeZoneComesFromTheDSN(t *testing.T) {
	ctx := context.Background()
	_, schema := pgtest.NewSchema(t)
	for _, zone := range pgcert.TimeZones {
		dsn, err := pgcert.WithTimeZone(pgtest.DSN(t), zone)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.SessionSetting(ctx, "TimeZone")
		if err != nil || got != zone {
			t.Fatalf("session TimeZone %q (%v); want %q", got, err, zone)
		}
		created := time.Date(2025, 11, 2, 6, 30, 0, 1, time.UTC) // the hour New York's clocks go back
		if _, err := s.Enqueue(ctx, []impl.Message{{Subscriber: zone, EventID: "e", CreatedAt: created}}); err != nil {
			t.Fatal(err)
		}
		ms, err := s.ListMessages(ctx, zone)
		if err != nil || len(ms) != 1 || ms[0].CreatedAt != impl.TimeOf(impl.NanosOf(created)) {
			t.Fatalf("under %s: %v %v", zone, ms, err)
		}
		if n, err := s.DeleteExpired(ctx, created, created); err != nil || n != 0 {
			t.Fatalf("under %s: DeleteExpired at CreatedAt deleted %d (%v)", zone, n, err)
		}
		if n, err := s.DeleteExpired(ctx, created.Add(1), created); err != nil || n != 1 {
			t.Fatalf("under %s: DeleteExpired 1ns past CreatedAt deleted %d (%v)", zone, n, err)
		}
		_ = s.Close()
	}
}

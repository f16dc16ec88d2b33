// Command pgmain certifies impl/pgstore the way an implementer's program
// certifies a Postgres-backed store of its own: pgcert.Factories handed to
// conformance.Main, on the server $DELIVERYSIM_PG_DSN names. The signal
// tests build and stop it (TestCertifyStopsOnSignals).
package main

import (
	"context"
	"os"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
)

func main() {
	open := func(ctx context.Context, dsn, schema string) (impl.Store, error) {
		return pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 8, ApplicationName: "deliverysim-pgmain"})
	}
	conformance.Main(pgcert.Factories("pgmain", os.Getenv("DELIVERYSIM_PG_DSN"), open, conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true})...)
}

package peer

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Run checks its own results (River's table holds every job, completed; the
// replay verifies every delivery), so a successful small run is the
// assertion; this test adds that nothing is left on the server.
func TestRunLeavesNothingBehind(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	before := peerDatabases(t, dsn)
	res, err := Run(ctx, Config{DSN: dsn, Jobs: 600, Rounds: 2, RiverWorkers: 50, InsertBatch: 250})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeliverysimRuns) != 2 || len(res.RiverRuns) != 2 || res.Ratio <= 0 || res.RiverPerSecond <= 0 || res.DeliverysimPerSecond <= 0 {
		t.Fatalf("incomplete result: %+v", res)
	}
	if after := peerDatabases(t, dsn); after != before {
		t.Fatalf("River databases before the run: %q, after: %q; the run must drop its own", before, after)
	}
}

func peerDatabases(t *testing.T, dsn string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname LIKE 'deliverysim_peer_%' ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, ",")
}

func TestRunRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{{}, {DSN: "postgres://x", Jobs: 2}, {DSN: "postgres://x", Rounds: -1}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) succeeded; want an error", c)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

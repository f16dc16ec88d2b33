package sim

import (
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// The store contract promises identical results on every backend, so a
// seed's trace must be byte-identical on Postgres and in memory — here with
// two nodes sharing the store and async cursor writes, the hardest case.
func TestPostgresTraceEqualsMemory(t *testing.T) {
	pgtest.DSN(t) // skips (or fails under DELIVERYSIM_REQUIRE_PG=1) without a server
	var seed uint64
	for s := uint64(1); s < 200; s++ {
		w := DrawWorkload(s)
		if w.Nodes == 2 && w.CursorMode == engine.CursorAsync {
			seed = s
			break
		}
	}
	if seed == 0 {
		t.Fatal("no two-node async seed below 200")
	}
	mem := mustRun(t, Config{Seed: seed})
	pg := mustRun(t, Config{Seed: seed, Store: func() (impl.Store, error) { return pgtest.NewStore(t), nil }})
	if pg.TraceHash != mem.TraceHash {
		a, b := mem.TraceText(), pg.TraceText()
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		lo := max(0, i-200)
		t.Fatalf("seed %d: postgres trace differs from memory near byte %d:\nmemory:   %q\npostgres: %q",
			seed, i, a[lo:min(len(a), i+200)], b[lo:min(len(b), i+200)])
	}
	if len(pg.Violations) != len(mem.Violations) {
		t.Fatalf("violations differ: %d vs %d", len(pg.Violations), len(mem.Violations))
	}
}

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

// Every corner-case input class at once (empty, large, binary and
// identical payloads; ids with quotes, backslashes, unicode and
// normalization twins; miniblocks past 2^53; whole-second created_at ties)
// round-trips through Postgres exactly as through memory.
func TestPostgresCornersEqualMemory(t *testing.T) {
	pgtest.DSN(t)
	reached := map[string]int{}
	// Two worlds with a timestamp stream (created_at ties) and a log stream
	// in one long minipool (index digit boundaries).
	var seeds []uint64
	for seed := uint64(1); seed < 300 && len(seeds) < 2; seed++ {
		w := DrawWorkloadWith(seed, AllCorners)
		ts, long := false, false
		for _, st := range w.Streams {
			ts = ts || st.Kind == engine.TimestampStream
			long = long || (st.Kind == engine.LogStream && st.SealEvery > w.Produce && st.Events >= 20)
		}
		if ts && long && len(w.Bots) >= 2 {
			seeds = append(seeds, seed)
		}
	}
	for _, seed := range seeds {
		w := DrawWorkloadWith(seed, AllCorners)
		mem := mustRun(t, Config{Seed: seed, Workload: &w})
		pg := mustRun(t, Config{Seed: seed, Workload: &w, Store: func() (impl.Store, error) { return pgtest.NewStore(t), nil }})
		if pg.TraceHash != mem.TraceHash {
			t.Fatalf("seed %d with every corner class: postgres trace differs from memory", seed)
		}
		if len(pg.Violations) != 0 || len(mem.Violations) != 0 {
			t.Fatalf("seed %d with every corner class: violations on postgres %v, memory %v", seed, pg.Violations, mem.Violations)
		}
		for name, n := range pg.Coverage {
			reached[name] += n
		}
	}
	for _, name := range traitNames {
		if reached[name] == 0 {
			t.Errorf("%s never reached a handler on postgres: the round trip was not tested for it", name)
		}
	}
}

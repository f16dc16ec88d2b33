package sim

import "testing"

// Every probe the boundary catalogue names is a situation of the coverage
// catalogue (so --require-coverage fails when no seed reaches it), and
// every boundary probe belongs to some boundary; a boundary with no
// probe says why.
func TestBoundariesAreInTheCatalogue(t *testing.T) {
	inCatalogue := map[string]bool{}
	for _, p := range Catalogue() {
		inCatalogue[p.Name] = true
	}
	named := map[string]bool{}
	for _, b := range Boundaries() {
		if len(b.Probes) < 3 && b.Gap == "" {
			t.Errorf("boundary %q has %d probes and no Gap saying why not three", b.Setting, len(b.Probes))
		}
		for _, p := range b.Probes {
			if !inCatalogue[p] {
				t.Errorf("boundary %q names probe %q, which is not in the coverage catalogue", b.Setting, p)
			}
			named[p] = true
		}
	}
	for _, p := range append(append([]Probe(nil), boundaryProbes...), edgeProbes...) {
		if !named[p.Name] {
			t.Errorf("probe %q belongs to no boundary", p.Name)
		}
	}
}

// The wide worlds are the ones that reach a cursor write of 100 streams:
// drawWide's shape must stay within the workload's limits.
func TestWideWorldsAreValid(t *testing.T) {
	wide := 0
	for seed := uint64(1); seed <= 400; seed++ {
		w := DrawWorkload(seed)
		if len(w.Streams) < WideStreams {
			continue
		}
		wide++
		if err := w.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	if wide == 0 {
		t.Fatal("no wide world among seeds 1-400")
	}
}

// Long worlds reach the longest page: some seed's world queues 999 to
// 1300 rows for one bot in one batch, within the workload's limits.
func TestLongWorldsAreValid(t *testing.T) {
	long := 0
	for seed := uint64(1); seed <= 600; seed++ {
		w := DrawWorkload(seed)
		if w.BatchMax < LongPage-1 {
			continue
		}
		long++
		if err := w.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if n := len(w.Streams[0].Explicit); w.Streams[0].Name != "stream-long" || n < LongPage-1 || n > w.BatchMax {
			t.Fatalf("seed %d: a long world's list is %d events of %s (batch %d)", seed, n, w.Streams[0].Name, w.BatchMax)
		}
	}
	if long == 0 {
		t.Fatal("no long world among seeds 1-600")
	}
}

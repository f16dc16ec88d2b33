package sim

import (
	"testing"
)

// A run branched after step k is the seed's run up to k, record for
// record, and from there one continuation per trial: the same (k, trial)
// gives the same run, other trials other runs.
func TestRedrawKeepsThePrefixAndRedrawsTheRest(t *testing.T) {
	const seed = 7
	base, err := Run(Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	// Past the last step there is nothing to re-draw: the very same run.
	same, err := Run(Config{Seed: seed, Redraw: &Redraw{After: int64(base.TraceLines) * 10, Trial: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if same.TraceHash != base.TraceHash {
		t.Fatalf("a branch after the last step changed the run: %s vs %s", same.TraceHash, base.TraceHash)
	}
	// The prefix is the seed's at every branching step (a draw of step k
	// itself must still be the seed's).
	for i := 1; i < 12; i++ {
		k := base.Trace[len(base.Trace)*i/12].Step
		r, err := Run(Config{Seed: seed, Redraw: &Redraw{After: k, Trial: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for j, rec := range r.Trace {
			if rec.Step > k {
				break
			}
			if rec.String() != base.Trace[j].String() {
				t.Fatalf("branch after step %d: record %d differs:\n%s\n%s", k, j, rec.String(), base.Trace[j].String())
			}
		}
	}
	k := base.Trace[len(base.Trace)/3].Step
	prefix := func(r *Result) []string {
		var out []string
		for _, rec := range r.Trace {
			if rec.Step <= k {
				out = append(out, rec.String())
			}
		}
		return out
	}
	want := prefix(base)
	hashes := map[string]bool{}
	for trial := uint64(0); trial < 4; trial++ {
		r, err := Run(Config{Seed: seed, Redraw: &Redraw{After: k, Trial: trial}})
		if err != nil {
			t.Fatal(err)
		}
		got := prefix(r)
		if len(got) != len(want) {
			t.Fatalf("trial %d: %d records up to step %d, the seed's run has %d", trial, len(got), k, len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d: record %d differs before the branch:\n%s\n%s", trial, i, got[i], want[i])
			}
		}
		again, err := Run(Config{Seed: seed, Redraw: &Redraw{After: k, Trial: trial}})
		if err != nil {
			t.Fatal(err)
		}
		if again.TraceHash != r.TraceHash {
			t.Fatalf("trial %d is not deterministic", trial)
		}
		hashes[r.TraceHash] = true
	}
	if len(hashes) < 3 || hashes[base.TraceHash] {
		t.Errorf("4 trials gave %d different continuations (the seed's own among them: %v); the rest of the run is not re-drawn", len(hashes), hashes[base.TraceHash])
	}
}

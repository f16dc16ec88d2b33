package scenarios

import (
	"testing"

	"github.com/deliverysim/deliverysim/sim"
)

// Every known-bug variant is caught twice: by a library scenario that
// claims to show it, and by a blind random sweep that is told nothing. The
// seed that catches it is clean on the reference engine, so the catch is
// the bug's doing.
func TestEveryVariantIsCaught(t *testing.T) {
	reps, err := Mutants(MutantOptions{Seeds: 300})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != len(Variants()) || len(reps) < 15 {
		t.Fatalf("%d reports for %d variants", len(reps), len(Variants()))
	}
	for _, r := range reps {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Name, r.Error)
		}
		if len(r.Scenarios) == 0 {
			t.Errorf("%s: no library scenario claims to catch it", r.Name)
		}
		for _, sc := range r.Scenarios {
			if !sc.Caught {
				t.Errorf("%s: scenario %s expected %s, got %v", r.Name, sc.Scenario, sc.Expected, sc.Got)
			}
		}
		if !r.Caught {
			t.Errorf("%s escaped a blind sweep of %d seeds", r.Name, r.SeedsTried)
			continue
		}
		ref, err := sim.Run(sim.Config{Seed: *r.FirstFailingSeed})
		if err != nil {
			t.Fatal(err)
		}
		if len(ref.Violations) > 0 {
			t.Errorf("%s: seed %d also fails on the reference engine (%v), so it proves nothing about the bug", r.Name, *r.FirstFailingSeed, ref.Violations[0])
		}
	}
}

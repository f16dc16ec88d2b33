package scenarios

import (
	"testing"

	"github.com/deliverysim/deliverysim/sim"
)

// Every regression scenario (testdata/regress) holds on the reference
// engine, as the mutation harness requires of the unmutated build.
func TestRegressionScenariosHoldOnTheReference(t *testing.T) {
	reg, err := Regressions()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range reg {
		r, err := s.Run()
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if ok, why := s.Matches(r); !ok {
			t.Errorf("%s: %s (end %s, unfired %+v)", s.Name, why, r.End.Sub(sim.Epoch), r.Unfired)
		}
	}
}

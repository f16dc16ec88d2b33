package sim

import "testing"

// TestRegressionSeeds: seeds on which the reference engine once broke an
// invariant, run as the sweep runs them. Each names what it found.
func TestRegressionSeeds(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		what string
	}{
		// An Enqueue whose commit acknowledgement was lost had committed;
		// a claim sent the row and recorded its failure, and then the
		// redo of the hand-off sent the message direct again as attempt
		// 1: six sends against MaxAttempts 5 (bounded-retry). Found once
		// webhook-late changed this seed's run.
		{1076, "redo of an ambiguous hand-off sent direct beside its row"},
	} {
		r := mustRun(t, Config{Seed: c.seed})
		for _, v := range r.Violations {
			t.Errorf("seed %d (%s): %v", c.seed, c.what, v)
		}
	}
}

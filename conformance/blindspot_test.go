package conformance_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
)

// catchRuns is how many times TestBlindSpotBugsAreCaught* certify each
// planted bug (DELIVERYSIM_CATCH_RUNS, e.g. 20; 2 by default).
func catchRuns() int {
	if n, _ := strconv.Atoi(os.Getenv("DELIVERYSIM_CATCH_RUNS")); n > 0 {
		return n
	}
	return 2
}

// The check that must catch each blind-spot bug, and what its failure
// must say.
var blindSpotCatcher = map[string]struct{ check, says string }{
	conformance.BugKeysetNoTieBreak: {"Contract/ManyEqualCreatedAt", "of the 576 wanted: b1/e0090 (position 101)"},
	conformance.BugRequeueLeavesRow: {"Contract/Requeue", "b1/e1 2 times after Requeue, want once"},
}

// requireBlindSpotsCaught certifies each blind-spot bug of base runs
// times (the groups given, a fresh seed each) and fails unless its
// catching check failed every time, naming what it found.
func requireBlindSpotsCaught(t *testing.T, base conformance.Factory, groups ...string) {
	bugs := conformance.BlindSpotBackends(base)
	if len(bugs) != len(blindSpotCatcher) {
		t.Fatalf("%d blind-spot bugs, want %d", len(bugs), len(blindSpotCatcher))
	}
	runs := catchRuns()
	for _, f := range bugs {
		t.Run(f.Name, func(t *testing.T) {
			var want struct{ check, says string }
			for bug, w := range blindSpotCatcher {
				if f.Name == base.Name+"+bug:"+bug {
					want = w
				}
			}
			caught := 0
			for run := range runs {
				cert, err := conformance.Certify([]conformance.Factory{f}, conformance.Only(groups...),
					conformance.RapidChecks(100), conformance.ArtifactsDir(t.TempDir()))
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range cert.Failures() {
					if r.Name != want.check {
						continue
					}
					caught++
					if !strings.Contains(r.Message, want.says) {
						t.Errorf("run %d: %s failed without saying %q:\n%s", run, r.Name, want.says, r.Message)
					}
				}
				if cert.Passed {
					t.Errorf("run %d (seed %d): %s passed the suite", run, cert.Seed, f.Name)
				}
			}
			t.Logf("%s: %s caught it in %d of %d runs", f.Name, want.check, caught, runs)
			if caught != runs {
				t.Errorf("%s caught %s in %d of %d runs", want.check, f.Name, caught, runs)
			}
		})
	}
}

func TestBlindSpotBugsAreCaughtMemory(t *testing.T) {
	requireBlindSpotsCaught(t, memoryFactory(), conformance.GroupContract, conformance.GroupStateMachine)
}

func TestBlindSpotBugsAreCaughtPostgres(t *testing.T) {
	// The Contract group only: the catching checks are fixed scripts, and
	// a Postgres state machine per run would make 20 runs take many
	// minutes on a shared machine.
	requireBlindSpotsCaught(t, postgresFactory(t), conformance.GroupContract)
}

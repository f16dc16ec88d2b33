package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/sim"
)

// A library scenario that expects a clean run does not pass when a fault
// it schedules never fired (an engine that never asked its CrashHook,
// mutant engine.go:274:21, passed every crash scenario before this).
func TestCleanRunWithAnUnfiredFaultDoesNotMatch(t *testing.T) {
	s := &Scenario{RequireFired: true}
	if ok, why := s.Matches(&sim.Result{}); !ok {
		t.Fatalf("a clean run with every fault fired: %s", why)
	}
	r := &sim.Result{Unfired: []faults.Fault{{Kind: faults.CrashAfterSend, At: time.Second}}}
	if ok, why := s.Matches(r); ok || !strings.Contains(why, "never fired") {
		t.Fatalf("a clean run with an unfired crash point: matched %v (%s)", ok, why)
	}
	if ok, _ := (&Scenario{}).Matches(r); !ok {
		t.Fatal("a scenario outside the library (a regression, a user's file) failed on an unfired fault")
	}
	s.Expect.Violations = []string{"no-silent-loss"}
	r.Violations = nil
	if ok, _ := s.Matches(r); ok {
		t.Fatal("an expected violation that did not happen matched")
	}
}

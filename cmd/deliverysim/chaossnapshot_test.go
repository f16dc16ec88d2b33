package main

import (
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/model/oracle"
)

// TestChaosSnapshotPlant: the reference declares snapshot sources; a
// runtime that takes every DELETE change as delivered without sending it
// leaves the apps holding deleted files (snapshot-convergence FAILs),
// while no app is sent a change contradicting what it was given
// (snapshot-isolation PASSes) and the stream rules are untouched.
// snapshot-progress is not asserted: it judges each delete the healthy app
// missed, but a run whose kill allowances cover every such delete up to
// the end of the settle passes it (snapshot-slow-feed is its plant).
// reported-counters may FAIL too, rightly: the engine counts each skipped
// DELETE as acknowledged, a 2xx no app wrote.
func TestChaosSnapshotPlant(t *testing.T) {
	t.Parallel()
	code, rep, errOut := chaosRun(t, "DELIVERYSIM_TEST_MAIN=cli", "--plant", "snapshot-skip-deletes",
		"--seed", "11", "--duration", "12s", "--kills", "1", "--db-cuts", "0", "--bot-faults", "2", "--settle", "10s")
	if code != 1 {
		t.Fatalf("exit %d; want 1\n%s", code, lastLines(errOut, 20))
	}
	want := map[string]string{oracle.InvSnapshotConvergence: "FAIL", oracle.InvSnapshotIsolation: "PASS"}
	for inv, v := range want {
		if rep.Invariants[inv] != v {
			t.Errorf("%s: %q; want %s", inv, rep.Invariants[inv], v)
		}
	}
	for inv, v := range rep.Invariants {
		if v == "FAIL" && !strings.HasPrefix(inv, "snapshot-") && inv != oracle.InvReportedCounters {
			t.Errorf("%s FAILs too: the plant changes only snapshot deliveries", inv)
		}
	}
	if !strings.Contains(strings.Join(rep.Args, " "), "--snapshots declared") {
		t.Errorf("the report's args do not declare snapshot sources: %v", rep.Args)
	}
}

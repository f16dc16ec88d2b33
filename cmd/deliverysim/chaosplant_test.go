package main

import (
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/model/oracle"
)

// TestChaosPlantsFailTheirRules: two planted variants of the reference in
// one short run, each failing its own rule judged with the declared
// settings (PROTOCOL.md, "Rules judged with the declared settings"): a
// /metrics that counts every 2xx twice (reported-counters), and a restart
// that reads its streams from the start, not from its cursor
// (resume-from-cursor). Nothing else fails.
func TestChaosPlantsFailTheirRules(t *testing.T) {
	t.Parallel()
	code, rep, errOut := chaosRun(t, "DELIVERYSIM_TEST_MAIN=cli", "--plant", "overcount-acked,resume-from-start",
		"--seed", "11", "--duration", "12s", "--kills", "2", "--db-cuts", "0", "--bot-faults", "2", "--settle", "30s")
	if code != 1 {
		t.Fatalf("exit %d; want 1\n%s", code, lastLines(errOut, 20))
	}
	for _, inv := range []string{oracle.InvReportedCounters, oracle.InvResumeFromCursor} {
		if rep.Invariants[inv] != "FAIL" {
			t.Errorf("%s: %q; want FAIL", inv, rep.Invariants[inv])
		}
	}
	for inv, v := range rep.Invariants {
		if v == "FAIL" && inv != oracle.InvReportedCounters && inv != oracle.InvResumeFromCursor {
			t.Errorf("%s FAILs too: the plants must fail only their own rules", inv)
		}
	}
	if !strings.Contains(strings.Join(rep.Args, " "), "--plant overcount-acked,resume-from-start") {
		t.Errorf("the report's args do not carry the plants (a replay would run the reference): %v", rep.Args)
	}
	code, _, errOut = cli(t, nil, "chaos", "--plant", "no-such-plant", "--engine-cmd", "x")
	if code != 2 || !strings.Contains(errOut, "plant") {
		t.Errorf("an unknown plant: exit %d, %q; want 2 and a line naming --plant", code, errOut)
	}
}

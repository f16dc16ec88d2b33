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

// TestChaosRetentionPlantFailsRetentionBounds: a reference whose
// /v1/observe reports no retention drops while its retention drops the
// held backlog (the last bot's, past a declared cap of 20 and a TTL of
// 2 s, with a cleanup every second) fails retention-bounds alone: what is
// missing from the wire is what retention may drop, so nothing is lost.
// The other retention plants are judged the same way (runtime/chaos
// retention_test.go); with --retention none the same run judges nothing
// of retention and loses nothing (the engine then keeps every message).
func TestChaosRetentionPlantFailsRetentionBounds(t *testing.T) {
	t.Parallel()
	// 20 s: the key waits for a held backlog until 10 s in
	// (heldEnoughLocked), time a loaded machine's engine needs to fetch it.
	args := []string{"--seed", "12", "--duration", "20s", "--kills", "0", "--db-cuts", "0", "--bot-faults", "0", "--settle", "30s",
		"--retention-ttl", "2s", "--retention-max", "20", "--cleanup-interval", "1s"}
	code, rep, errOut := chaosRun(t, "DELIVERYSIM_TEST_MAIN=cli", append([]string{"--plant", "retention-uncounted"}, args...)...)
	if code != 1 || rep.Invariants[oracle.InvRetentionBounds] != "FAIL" {
		t.Fatalf("exit %d, retention-bounds %q; want 1 and FAIL\n%s", code, rep.Invariants[oracle.InvRetentionBounds], lastLines(errOut, 20))
	}
	for inv, v := range rep.Invariants {
		if v == "FAIL" && inv != oracle.InvRetentionBounds {
			t.Errorf("%s FAILs too: the plant must fail only retention-bounds", inv)
		}
	}
	if rep.RetentionMayDrop == 0 || rep.Lost != 0 {
		t.Errorf("retention may have dropped %d, lost %d; want some dropped and none lost", rep.RetentionMayDrop, rep.Lost)
	}
	code, rep, errOut = chaosRun(t, "DELIVERYSIM_TEST_MAIN=cli", append([]string{"--retention", "none"}, args...)...)
	if code != 0 || rep.Invariants[oracle.InvRetentionBounds] != "not judged" || rep.RetentionMayDrop != 0 {
		t.Errorf("--retention none: exit %d, retention-bounds %q, may have dropped %d; want 0, not judged, 0\n%s",
			code, rep.Invariants[oracle.InvRetentionBounds], rep.RetentionMayDrop, lastLines(errOut, 20))
	}
}

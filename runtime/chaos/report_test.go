package chaos

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The harness's own verdicts, each shown to fire on its planted cause and
// to stay quiet without it.
func TestReportVerdicts(t *testing.T) {
	verdicts := func(reference bool, scrapes MetricsSeen, exitErr error, killed bool, harnessErr string) map[string]string {
		h := &harness{cfg: Config{Reference: reference, Duration: time.Second}, rec: newRecorder(oracle.CheckParams{})}
		h.scrapes = scrapes
		if harnessErr != "" {
			h.rec.harnessError("%s", harnessErr)
		}
		return h.report(nil, faultCounts{}, 0, true, 0, oracle.CheckReport{}, exitErr, killed).Invariants
	}
	good := MetricsSeen{Scrapes: 3, Acked: 10, Sent: 12}
	clean := verdicts(true, good, nil, false, "")
	for _, inv := range []string{InvMetrics, InvCleanStop, InvNoCrash, InvSigned, oracle.InvNoSilentLoss} {
		if clean[inv] != "PASS" {
			t.Errorf("clean run: %s = %q, want PASS", inv, clean[inv])
		}
	}
	if v := verdicts(true, MetricsSeen{Scrapes: 5}, nil, false, "")[InvMetrics]; v != "FAIL" {
		t.Errorf("reference engine whose /metrics never showed a delivery: metrics = %q, want FAIL", v)
	}
	if v, ok := verdicts(false, MetricsSeen{}, nil, false, "")[InvMetrics]; ok {
		t.Errorf("another engine's metrics are not judged, got %q", v)
	}
	if v := verdicts(true, good, errors.New("signal: terminated"), false, "")[InvCleanStop]; v != "FAIL" {
		t.Errorf("exit by signal after SIGTERM: clean-shutdown = %q, want FAIL", v)
	}
	if v := verdicts(true, good, nil, true, "")[InvCleanStop]; v != "FAIL" {
		t.Errorf("no exit after SIGTERM: clean-shutdown = %q, want FAIL", v)
	}
	if v := verdicts(true, good, nil, false, "the engine exited on its own")[InvNoCrash]; v != "FAIL" {
		t.Errorf("an unexpected exit: no-unexpected-exit = %q, want FAIL", v)
	}
	for _, inv := range []string{oracle.InvRetentionBounds, oracle.InvSnapshotConvergence, oracle.InvSnapshotIsolation} {
		if clean[inv] != notJudged {
			t.Errorf("%s = %q, want %q (the workload has no retention or snapshot sources)", inv, clean[inv], notJudged)
		}
	}
}

// TestRecorderRejectionFails: a request a receiver rejects is a
// signed-requests violation.
func TestRecorderRejectionFails(t *testing.T) {
	h := &harness{cfg: Config{Duration: time.Second}, rec: newRecorder(oracle.CheckParams{})}
	h.rec.rejected("bot-1", "ev-1", "no matching webhook-signature")
	rep := h.report(nil, faultCounts{}, 0, true, 0, oracle.CheckReport{}, nil, false)
	if rep.Invariants[InvSigned] != "FAIL" || !rep.Failed() {
		t.Fatalf("signed-requests = %q, failed %v; want FAIL", rep.Invariants[InvSigned], rep.Failed())
	}
}

// TestPlanIsSeeded: the same seed gives the same schedule; kills and cuts
// are the numbers asked for, inside the fault phase; bot-0 is never hit.
func TestPlanIsSeeded(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2"}
	a := Plan(Config{Seed: 7, Duration: time.Minute, Kills: 10, DBCuts: 4, BotFaults: 15}, bots)
	b := Plan(Config{Seed: 7, Duration: time.Minute, Kills: 10, DBCuts: 4, BotFaults: 15}, bots)
	if len(a) != len(b) {
		t.Fatalf("plans differ in length: %d vs %d", len(a), len(b))
	}
	kills, cuts := 0, 0
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatalf("fault %d differs: %v vs %v", i, a[i], b[i])
		}
		if a[i].At < 0 || a[i].At >= time.Minute {
			t.Errorf("%v is outside the fault phase", a[i])
		}
		if a[i].Bot == "bot-0" {
			t.Errorf("%v hits the healthy witness bot-0", a[i])
		}
		// Every drawn fault is one the simulator's schedules could hold
		// and one this harness can carry out.
		if err := Executable(a[i]); err != nil {
			t.Errorf("drawn fault not executable: %v", err)
		}
		switch a[i].Kind {
		case faults.Crash:
			kills++
		case faults.StoreAmbiguous, faults.StoreError:
			cuts++
		}
	}
	if kills != 10 || cuts != 4 || len(a) != 29 {
		t.Errorf("%d kills, %d cuts, %d faults; want 10, 4, 29", kills, cuts, len(a))
	}
	if c := Plan(Config{Seed: 8, Duration: time.Minute, Kills: 10, DBCuts: 4, BotFaults: 15}, bots); reflect.DeepEqual(c[:2], a[:2]) {
		t.Error("seeds 7 and 8 gave the same first actions")
	}
}

// Executable refuses what the real harness cannot do, so a schedule written
// for the simulator is not silently half-executed.
func TestExecutableRefusesSimulatorOnlyFaults(t *testing.T) {
	for _, f := range []faults.Fault{
		{Kind: faults.CrashAfterSend, Node: EngineNode},
		{Kind: faults.ClockDrift, Node: EngineNode, PPM: 10},
		{Kind: faults.StoreError, Node: EngineNode, Method: "Ack", Until: time.Second},
		{Kind: faults.StoreError, Node: EngineNode}, // a stall with no window
		{Kind: faults.Crash, Node: "node-1"},
		{Kind: faults.Webhook5xx, At: time.Second}, // no bot, no window
		// A real runtime reports every outcome (its client times out).
		{Kind: faults.WebhookHang, Bot: "bot-1", Until: time.Second},
		{Kind: faults.ResultLost, Bot: "bot-1", Until: time.Second},
	} {
		if err := Executable(f); err == nil {
			t.Errorf("%v accepted", f)
		}
	}
}

// TestReportUnjudgedFindingsDoNotFail: what a check this workload cannot
// judge reports is kept aside and leaves its verdict "not judged"; a judged
// check's violation still fails the run.
func TestReportUnjudgedFindingsDoNotFail(t *testing.T) {
	h := &harness{cfg: Config{Duration: time.Second}, rec: newRecorder(oracle.CheckParams{})}
	resend := oracle.Violation{Invariant: oracle.InvResendWithCause, Bot: "bot-1", Event: "ev-1"}
	rep := h.report(nil, faultCounts{}, 0, true, 0, oracle.CheckReport{Violations: []oracle.Violation{resend}}, nil, false)
	if rep.Failed() || rep.Invariants[oracle.InvResendWithCause] != notJudged || len(rep.Unjudged) != 1 {
		t.Errorf("an unjudged check's finding: failed %v, verdict %q, unjudged %v; want a pass, %q and the finding kept aside",
			rep.Failed(), rep.Invariants[oracle.InvResendWithCause], rep.Unjudged, notJudged)
	}
	loss := oracle.Violation{Invariant: oracle.InvNoSilentLoss, Bot: "bot-1", Event: "ev-2"}
	rep = h.report(nil, faultCounts{}, 0, true, 0, oracle.CheckReport{Violations: []oracle.Violation{resend, loss}}, nil, false)
	if !rep.Failed() || rep.Invariants[oracle.InvNoSilentLoss] != "FAIL" || len(rep.Violations) != 1 || rep.Lost != 1 {
		t.Errorf("a judged loss beside it: failed %v, verdict %q, violations %v, lost %d; want FAIL with the loss alone",
			rep.Failed(), rep.Invariants[oracle.InvNoSilentLoss], rep.Violations, rep.Lost)
	}
}

package chaos

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/runtime/protocol"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The harness's own verdicts, each shown to fire on its planted cause and
// to stay quiet without it.
func TestReportVerdicts(t *testing.T) {
	verdicts := func(reference bool, scrapes MetricsSeen, exitErr error, killed bool, harnessErr string) map[string]string {
		h := &harness{cfg: Config{Reference: reference, Duration: time.Second}, rec: newRecorder()}
		h.scrapes = scrapes
		if harnessErr != "" {
			h.rec.harnessError("%s", harnessErr)
		}
		return h.report(nil, faultCounts{}, 0, true, 0, exitErr, killed).Invariants
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
	if v := verdicts(false, MetricsSeen{}, nil, false, "")[InvMetrics]; v != notJudged {
		t.Errorf("another engine serving no /metrics: %q, want %q", v, notJudged)
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
	h := &harness{cfg: Config{Duration: time.Second}, rec: newRecorder()}
	h.rec.rejected("bot-1", "ev-1", "no matching webhook-signature")
	rep := h.report(nil, faultCounts{}, 0, true, 0, nil, false)
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

// TestReportNotJudgedWithoutObservation: an engine that serves no
// observation endpoint is not judged on what only the endpoint shows (the
// verdict says why), and still passes; the same engine reporting a cursor
// short of the stream's last event fails cursor-progress.
func TestReportNotJudgedWithoutObservation(t *testing.T) {
	h := &harness{cfg: Config{Duration: time.Second, Engine: ReferenceEngine(), KillWindow: DefaultKillWindow}, rec: newRecorder()}
	h.rec.observed(nil, "answered 404")
	rep := h.report(nil, faultCounts{}, 0, true, 0, nil, false)
	if rep.Failed() {
		t.Fatalf("a run with nothing owed failed: %v", rep.Violations)
	}
	for _, inv := range []string{oracle.InvCursorProgress, oracle.InvDeadLetterEarned, oracle.InvCursorMonotonic} {
		var v Verdict
		for _, x := range rep.Verdicts {
			if x.Invariant == inv {
				v = x
			}
		}
		if v.Verdict != notJudged || !strings.Contains(v.Why, "404") {
			t.Errorf("%s without an observation endpoint: %+v; want %q with the reason", inv, v, notJudged)
		}
	}

	h = &harness{cfg: Config{Duration: time.Second, Engine: ReferenceEngine(), KillWindow: DefaultKillWindow}, rec: newRecorder()}
	r := h.rec
	r.mu.Lock()
	r.membershipLocked(streamLog, "bot-0", impl.Position{}, true)
	r.producedLocked(streamLog, true, "ev-1", impl.Position{Major: 79, Minor: 3}, []byte("x"))
	r.mu.Unlock()
	r.handled("bot-0", "ev-1")
	short := &protocol.Observation{Cursors: []protocol.ObservedCursor{{Stream: streamLog, Pos: protocol.Position{Major: 79, Minor: 2}}}, DeadLetters: []protocol.DeadLetter{}}
	r.atHeal, r.atEnd = short, short
	if rep := h.report(nil, faultCounts{}, 0, true, 0, nil, false); rep.Invariants[oracle.InvCursorProgress] != "FAIL" {
		t.Errorf("cursor at (79,2) after the settle, last event at (79,3): cursor-progress %q, want FAIL", rep.Invariants[oracle.InvCursorProgress])
	}
	at := &protocol.Observation{Cursors: []protocol.ObservedCursor{{Stream: streamLog, Pos: protocol.Position{Major: 79, Minor: 3}}}, DeadLetters: []protocol.DeadLetter{}}
	r.atHeal, r.atEnd = at, at
	if rep := h.report(nil, faultCounts{}, 0, true, 0, nil, false); rep.Failed() {
		t.Errorf("cursor on the last event: %v", rep.Violations)
	}
}

// TestPlanFaultsFilter: --faults keeps only the kinds asked for, each
// where the unfiltered plan of the seed had it.
func TestPlanFaultsFilter(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2"}
	c := Config{Seed: 7, Duration: time.Minute, Kills: 10, DBCuts: 4, BotFaults: 15}
	all := Plan(c, bots)
	c.Faults = []faults.Kind{faults.Crash, faults.Webhook5xx}
	some := Plan(c, bots)
	var want []faults.Fault
	for _, f := range all {
		if f.Kind == faults.Crash || f.Kind == faults.Webhook5xx {
			want = append(want, f)
		}
	}
	if len(some) == 0 || !reflect.DeepEqual(some, want) {
		t.Errorf("filtered plan %v; want %v", some, want)
	}
}

// A long bot outage is planned when the fault phase holds it: 5xx on the
// last bot for longer than the declared retry schedule (longOutage), inside
// the fault phase; none when it does not fit, and none with no attempt
// limit declared.
func TestPlanLongBotOutage(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2", "bot-3"}
	eng := ReferenceEngine()
	l := longOutage(eng)
	// 8 attempts of 0.5s timeout and 1s breaker, backoffs 0.1+0.2+0.4+0.8+1+1+1, and 2s.
	if want := 12*time.Second + 4500*time.Millisecond + 2*time.Second; l != want {
		t.Fatalf("longOutage(reference) = %s; want %s", l, want)
	}
	long := func(p []faults.Fault) []faults.Fault {
		var out []faults.Fault
		for _, f := range p {
			if f.Bot != "" && f.Until-f.At >= l {
				out = append(out, f)
			}
		}
		return out
	}
	for seed := uint64(1); seed <= 50; seed++ {
		p := long(Plan(Config{Seed: seed, Duration: time.Minute, BotFaults: 15, Engine: eng}, bots))
		if len(p) != 1 || p[0].Kind != faults.Webhook5xx || p[0].Bot != "bot-3" || p[0].At < 6*time.Second || p[0].Until > 54*time.Second {
			t.Fatalf("seed %d, 60s: long outages %v; want one webhook-5xx on bot-3 inside [6s, 54s]", seed, p)
		}
	}
	if p := long(Plan(Config{Seed: 1, Duration: 20 * time.Second, Engine: eng}, bots)); len(p) != 0 {
		t.Errorf("20s cannot hold a %s outage: %v", l, p)
	}
	if p := long(Plan(Config{Seed: 1, Duration: time.Minute}, bots)); len(p) != 0 {
		t.Errorf("no attempt limit declared: %v", p)
	}
}

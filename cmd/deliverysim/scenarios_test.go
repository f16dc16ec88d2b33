package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/scenarios"
)

func TestScenariosListsTheLibraryAndEachPasses(t *testing.T) {
	code, out, errS := cli(t, nil, "scenarios", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errS)
	}
	rows := decode[scenariosReport](t, out).Scenarios
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
		if !r.Ran || !r.Passed || r.Title == "" || r.Source == "" {
			t.Errorf("%s: ran %v passed %v (%s)", r.Name, r.Ran, r.Passed, r.Note)
		}
	}
	for _, story := range []string{
		"sealed-during-downtime", "minipool-replayed-after-restart", "webhook-failure-with-key",
		"offline-bot-never-publishes-key", "crash-between-delete-and-send", "fire-and-forget-cursor-writes",
		"one-app-fails-others-converge", "timestamp-cursor-equal-created-at", "late-events-from-skewed-producer",
		"poison-message-does-not-block", "circuit-opens-then-recovers", "retention-while-delivering",
		"bot-removed-while-queued", "clock-skew-on-retention-node",
	} {
		if !slices.Contains(names, story) {
			t.Errorf("no scenario %s", story)
		}
	}
	_, human, _ := cli(t, nil, "scenarios")
	if !strings.Contains(human, "PASS  sealed-during-downtime") || !strings.Contains(human, "0 fail") {
		t.Fatalf("human listing:\n%s", human)
	}
}

func TestMutantsReportsEveryVariantCaught(t *testing.T) {
	code, out, errS := cli(t, nil, "mutants", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errS, out)
	}
	reps := decode[mutantsReport](t, out).Variants
	if len(reps) != len(scenarios.Variants()) {
		t.Fatalf("%d reports for %d variants", len(reps), len(scenarios.Variants()))
	}
	for _, r := range reps {
		if !r.Caught || !r.CaughtByScenario || r.Invariant == "" || r.FirstFailingSeed == nil ||
			r.SeedsToFirstFailure < 1 || r.SecondsToFirstFailure <= 0 {
			t.Errorf("%+v", r)
		}
	}
	code, out, _ = cli(t, nil, "mutants", "--only", "no-receiver-dedup")
	if code != 0 || !strings.Contains(out, "no-receiver-dedup") || !strings.Contains(out, "verdict: PASS") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if code, _, errS := cli(t, nil, "mutants", "--only", "nope"); code != 2 || !strings.Contains(errS, "unknown variant") {
		t.Fatalf("exit %d: %s", code, errS)
	}
}

// A failing run is minimized to a scenario file with fewer faults and
// events that, run again, fails with the same invariant.
func TestFailingRunWritesAMinimizedScenarioThatReproduces(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"DELIVERYSIM_MIN_DIR": dir}
	for seed := 1; seed <= 20; seed++ {
		code, out, errS := cli(t, env, "run", "--seed", strconv.Itoa(seed), "--bugs", "delete-before-send", "--json")
		if code != 1 {
			continue
		}
		rep := decode[runReport](t, out)
		m := rep.Minimized
		if m == nil {
			t.Fatalf("seed %d failed but nothing was minimized: %s", seed, errS)
		}
		if !strings.Contains(errS, "minimized: "+m.Path) || filepath.Dir(filepath.Dir(m.Path)) != dir {
			t.Fatalf("path %s not reported on stderr or not in %s: %s", m.Path, dir, errS)
		}
		if m.Invariant != rep.Violations[0].Invariant {
			t.Fatalf("minimized for %s, the run failed first with %s", m.Invariant, rep.Violations[0].Invariant)
		}
		if m.After.Faults >= m.Before.Faults || m.After.Events >= m.Before.Events {
			t.Fatalf("not smaller: before %+v after %+v", m.Before, m.After)
		}
		sc, err := scenarios.LoadFile(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		if got := scenarios.SizeOf(sc); got != m.After {
			t.Fatalf("the file holds %+v, the report says %+v", got, m.After)
		}
		code2, out2, _ := cli(t, env, "run", "--scenario", m.Path, "--json")
		again := decode[runReport](t, out2)
		if code2 != 1 || again.Invariants[m.Invariant] != "fail" || again.Expected == nil || !again.Expected.Matches {
			t.Fatalf("replaying %s: exit %d, invariants %v, expected %+v", m.Path, code2, again.Invariants, again.Expected)
		}
		if again.Minimized != nil {
			t.Fatal("a reproduction that fails as it says was minimized again")
		}
		_, human, _ := cli(t, env, "run", "--seed", strconv.Itoa(seed), "--bugs", "delete-before-send")
		if !strings.Contains(human, "minimized: "+filepath.Join(dir, "seed-"+strconv.Itoa(seed)+"-")) || !strings.Contains(human, "-delete-before-send-min.yaml") {
			t.Fatalf("human output does not print the path:\n%s", human)
		}
		// Issue 11 defect 7: a second run of the same seed wrote over the
		// first one's file; each run now has a directory of its own.
		if strings.Contains(human, "minimized: "+m.Path+"\n") {
			t.Fatalf("the second run wrote its minimized scenario over the first's (%s)", m.Path)
		}
		if _, err := os.Stat(m.Path); err != nil {
			t.Fatalf("the first run's minimized scenario is gone: %v", err)
		}
		return
	}
	t.Fatal("no seed in 1..20 failed with delete-before-send")
}

func TestRunScenarioByNameAndByFile(t *testing.T) {
	code, out, errS := cli(t, nil, "run", "--scenario", "sealed-during-downtime", "--json")
	rep := decode[runReport](t, out)
	if code != 0 || rep.Scenario != "sealed-during-downtime" || rep.Expected == nil || !rep.Expected.Matches || rep.Counters.Obligations != 20 {
		t.Fatalf("exit %d %s: %+v", code, errS, rep)
	}
	code, out, _ = cli(t, nil, "run", "--scenario", "sealed-during-downtime", "--bugs", "fresh-sync-on-boot", "--json", "--no-minimize")
	rep = decode[runReport](t, out)
	if code != 1 || rep.Invariants["no-silent-loss"] != "fail" || rep.Expected.Matches || rep.Minimized != nil {
		t.Fatalf("with the bug: exit %d, %+v", code, rep.Invariants)
	}
	if !strings.HasSuffix(rep.Reproduce, "run --scenario sealed-during-downtime --bugs fresh-sync-on-boot") {
		t.Fatalf("reproduce %q", rep.Reproduce)
	}
	f := filepath.Join(t.TempDir(), "copy.yaml")
	data, err := os.ReadFile(filepath.Join("..", "..", "scenarios", "sealed-during-downtime.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, out2, _ := cli(t, nil, "run", "--scenario", f, "--json")
	_, byName, _ := cli(t, nil, "run", "--scenario", "sealed-during-downtime", "--json")
	if decode[runReport](t, out2).TraceHash != decode[runReport](t, byName).TraceHash {
		t.Fatal("the file and the library scenario of the same content ran differently")
	}
}

func TestMalformedScenarioNamesLineAndField(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	doc := "name: bad\ntitle: a bad one\ntopology:\n  streams:\n    - {name: channel-1}\n  bots:\n    - {id: bot-1}\n" +
		"faults:\n  schedule:\n    - {kind: webhook-5xx, bot: bot-1, at: 5s, until: 2x}\n"
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errS := cli(t, nil, "run", "--scenario", f)
	want := f + `:10: field faults.schedule[0].until: "2x" is not a duration`
	if code != 2 || out != "" || strings.Count(errS, "\n") != 1 || !strings.Contains(errS, want) {
		t.Fatalf("exit %d, stderr %q; want one line containing %q", code, errS, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--seed", "1", "--scenario", "x"}, "not both"},
		{[]string{"run", "--scenario", "no-such-scenario"}, "no embedded scenario"},
		{[]string{"run", "--scenario", "sealed-during-downtime", "--faults", "crash=0.1"}, "does not combine"},
	} {
		code, _, errS := cli(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errS, tc.want) {
			t.Errorf("%v: exit %d, %q", tc.args, code, errS)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// oneLineExit2 runs args and requires exit 2, nothing on stdout and one
// line on stderr containing want.
func oneLineExit2(t *testing.T, want string, args ...string) {
	t.Helper()
	code, out, errS := cli(t, nil, args...)
	if code != 2 || out != "" || strings.Count(errS, "\n") != 1 || !strings.Contains(errS, want) {
		t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", args, code, out, errS, want)
	}
}

// Issue 11 defect 1: out-of-range clock faults panicked the simulator
// (Int64N of an overflowed bound); defect 4: NaN rates were accepted.
func TestOutOfRangeFaultPlansAreOneLineErrors(t *testing.T) {
	for _, tc := range []struct{ plan, want string }{
		{"clock-drift=0/2h34m", "clock-drift max 2h34m0s is outside [0, 30m0s]"},
		{"clock-offset=0/1281024h", "clock-offset max 1281024h0m0s is outside [0, 24h0m0s]"},
		{"crash=NaN", "crash rate NaN is outside [0, 1]"},
		{"crash=+Inf", "outside [0, 1]"},
		{"crash=-0.5", "outside [0, 1]"},
		{"webhook-slow=0.1/-1s", "outside [0, 24h0m0s]"},
	} {
		oneLineExit2(t, tc.want, "run", "--seed", "1", "--faults", tc.plan)
		oneLineExit2(t, tc.want, "sweep", "--seeds", "1-3", "--faults", tc.plan)
	}
}

func writeScenario(t *testing.T, faults string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "s.yaml")
	doc := "name: s\ntitle: t\ntopology:\n  streams:\n    - {name: channel-1}\n  bots:\n    - {id: bot-1}\n" + faults
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// Defects 1 and 2: a scenario's random plan or schedule with a clock fault
// out of range loaded and then panicked or spun for ever.
func TestOutOfRangeScenarioClockFaults(t *testing.T) {
	for _, tc := range []struct{ faults, want string }{
		{"faults: {random: \"clock-drift=0/3h\"}\n", "clock-drift max 3h0m0s is outside"},
		{"faults:\n  schedule:\n    - {kind: clock-drift, node: node-1, at: 0s, drift: -59m}\n", "drift -59m0s is outside [-30m0s, 30m0s]"},
		{"faults:\n  schedule:\n    - {kind: clock-drift, node: node-1, at: 0s, drift: -1h}\n", "is outside [-30m0s, 30m0s]"},
		{"faults:\n  schedule:\n    - {kind: clock-drift, node: node-1, at: 0s, drift: 10000h}\n", "is outside [-30m0s, 30m0s]"},
		{"faults:\n  schedule:\n    - {kind: clock-offset, node: node-1, at: 0s, offset: 1000h}\n", "offset 1000h0m0s is outside"},
	} {
		oneLineExit2(t, tc.want, "run", "--scenario", writeScenario(t, tc.faults))
	}
	// The largest drift allowed, both ways, runs to the end.
	for _, d := range []string{"-30m", "30m"} {
		f := writeScenario(t, "faults:\n  schedule:\n    - {kind: clock-drift, node: node-1, at: 0s, drift: "+d+"}\n")
		if code, _, errS := cli(t, nil, "run", "--scenario", f, "--json"); code != 0 {
			t.Errorf("drift %s: exit %d, %s", d, code, errS)
		}
	}
}

// Defect 3: /dev/zero was read until memory ran out, a FIFO blocked for
// ever.
func TestScenarioThatIsNotARegularFile(t *testing.T) {
	oneLineExit2(t, "not a regular file", "run", "--scenario", "/dev/zero")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	oneLineExit2(t, "not a regular file", "run", "--scenario", fifo)
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, 5<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	oneLineExit2(t, "larger than", "run", "--scenario", big)
}

// Defect 4: the full uint64 range said it spanned 0 seeds.
func TestHugeSeedRangesAreRefusedWithTheirRealSpan(t *testing.T) {
	oneLineExit2(t, "spans 18446744073709551616 seeds; one sweep runs at most 100000000", "sweep", "--seeds", "0-18446744073709551615")
	oneLineExit2(t, "spans 100000001 seeds", "sweep", "--seeds", "0-100000000")
	oneLineExit2(t, "--shard", "sweep", "--seeds", "1-10", "--shard", "3/2")
	oneLineExit2(t, "JOB_COMPLETION_INDEX", "sweep", "--seeds", "1-10", "--shard", "2")
	oneLineExit2(t, "--bots 100000 is more than 10000", "bench", "replay", "--bots", "100000")
	oneLineExit2(t, "deliveries; at most 20000000", "bench", "replay", "--bots", "1000", "--events", "100000")
}

// A sweep keeps a bounded window of outcomes, not one per seed: the
// collector's buffer never holds more than sweepWindow entries.
func TestSweepReportsInSeedOrderThroughABoundedWindow(t *testing.T) {
	a := &app{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c := &common{backend: "memory"}
	var got []uint64
	a.sweepSeeds(c, 10, 40, 3, func(o *seedOutcome) { got = append(got, o.seed) })
	for i, s := range got {
		if s != uint64(10+i) {
			t.Fatalf("outcome %d is seed %d; want seeds in order from 10: %v", i, s, got)
		}
	}
	if len(got) != 40 {
		t.Fatalf("%d outcomes, want 40", len(got))
	}
}

// SIGINT or SIGTERM (the cancelled context) in the middle of a sweep: the
// seeds that finished are summarised, marked interrupted, exit 130.
func TestInterruptedSweepPrintsPartialJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// Cancel once some seeds have been reported (the progress log says so).
	out, _, done := sweepRunning(t, ctx, cancel, "--seeds", "1-100000", "--json", "--parallel", "2")
	code := <-done
	rep := decode[sweepReport](t, out.String())
	if code != exitInterrupted || !rep.Interrupted || rep.SeedsRun == 0 || rep.SeedsRun >= 100000 || rep.SchemaVersion != schemaVersion {
		t.Fatalf("exit %d, interrupted %v, seeds run %d, schema_version %d; want 130, true, some but not all, %d",
			code, rep.Interrupted, rep.SeedsRun, rep.SchemaVersion, schemaVersion)
	}
}

func TestSweepJUnitAndArtifacts(t *testing.T) {
	dir := t.TempDir()
	junit, art := filepath.Join(dir, "out.xml"), filepath.Join(dir, "art")
	code, out, errS := cli(t, map[string]string{"GITHUB_ACTIONS": "true"}, "sweep", "--seeds", "1-12", "--bugs", "delete-before-send", "--junit", junit, "--artifacts", art, "--json")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, errS)
	}
	rep := decode[sweepReport](t, out)
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var js xunitSuites
	if err := xml.Unmarshal(data, &js); err != nil {
		t.Fatalf("not JUnit XML: %v\n%s", err, data)
	}
	if js.Tests != 12 || len(js.Suites) != 1 || len(js.Suites[0].Cases) != 12 || uint64(js.Failures) != rep.FailingSeedsTotal || js.Failures == 0 {
		t.Fatalf("JUnit: %d tests, %d failures, %d suites; the sweep had 12 seeds and %d failing", js.Tests, js.Failures, len(js.Suites), rep.FailingSeedsTotal)
	}
	for i, c := range js.Suites[0].Cases {
		if c.Name != "seed "+strconv.Itoa(i+1) {
			t.Fatalf("case %d is %q", i, c.Name)
		}
	}
	f := rep.FailingSeeds[0]
	if f.Artifacts == "" {
		t.Fatal("the failing seed has no artifacts")
	}
	for _, name := range []string{"trace.txt", "scenario.yaml", "minimized.yaml", "report.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(f.Artifacts, name)); err != nil {
			t.Errorf("artifact %s: %v", name, err)
		}
	}
	// The HTML report is the failing run's: its violation is shown.
	if page, err := os.ReadFile(filepath.Join(f.Artifacts, "report.html")); err == nil {
		if !strings.Contains(string(page), `id="violations"`) || !strings.Contains(string(page), f.Invariants[0]) {
			t.Errorf("the artifact HTML report does not show the violation of %v", f.Invariants)
		}
	}
	if code, _, errS := cli(t, nil, "run", "--scenario", filepath.Join(f.Artifacts, "minimized.yaml")); code != 1 {
		t.Errorf("the minimized artifact does not fail when replayed: exit %d %s", code, errS)
	}
	if !strings.Contains(errS, "::error file="+filepath.Join(f.Artifacts, "minimized.yaml")+",title=deliverysim%3A seed ") {
		t.Errorf("no GitHub annotation for the failing seed on stderr:\n%s", errS)
	}
	if _, _, errS := cli(t, nil, "sweep", "--seeds", "1-3", "--bugs", "delete-before-send"); strings.Contains(errS, "::error") {
		t.Error("annotations printed outside GitHub Actions")
	}
}

// Deliver 6: the shards of a range, merged, are the sweep of the range.
func TestShardsMergeToTheWholeSweep(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sweep", "--seeds", "3-41", "--bugs", "delete-before-send", "--json"}
	wantCode, whole, _ := cli(t, nil, args...)
	var files []string
	for i, shard := range []string{"1/3", "2/3"} {
		_, out, _ := cli(t, nil, append(args, "--shard", shard)...)
		f := filepath.Join(dir, strconv.Itoa(i)+".json")
		os.WriteFile(f, []byte(out), 0o644)
		files = append(files, f)
	}
	// The third shard through a Kubernetes Indexed Job's variable.
	_, out3, _ := cli(t, map[string]string{"JOB_COMPLETION_INDEX": "2"}, append(args, "--shard", "3")...)
	if decode[sweepReport](t, out3).Shard.Index != 3 {
		t.Fatalf("JOB_COMPLETION_INDEX=2 did not run shard 3: %s", out3)
	}
	f3 := filepath.Join(dir, "2.json")
	os.WriteFile(f3, []byte(out3), 0o644)
	files = append(files, f3)
	code, merged, errS := cli(t, nil, append([]string{"merge", "--json"}, files...)...)
	if code != wantCode || merged != whole {
		t.Fatalf("merge: exit %d (sweep %d) %s\nmerged:\n%s\nwhole:\n%s", code, wantCode, errS, merged, whole)
	}
	oneLineExit2(t, "shards 2/3 are missing", "merge", files[0], files[2])
	oneLineExit2(t, "given twice", "merge", files[0], files[0], files[1], files[2])
	oneLineExit2(t, "not a regular file", "merge", "/dev/null")
	bogus := filepath.Join(dir, "bogus.json")
	os.WriteFile(bogus, []byte(`{"seed": 1}`), 0o644)
	oneLineExit2(t, "not a sweep report", "merge", bogus)
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable":   "postgres://u@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                               "postgres://u@h/db",
		"host=h user=u password=secret dbname=d":          "host=h user=u dbname=d",
		"host=h password='se cret' user=u":                "host=h user=u",
		"postgres://h/db?password=secret&sslmode=disable": "postgres://h/db?sslmode=disable",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
	c := common{backend: "postgres", dsn: "postgres://u:secret@h/db"}
	if r := c.reproduce(7); strings.Contains(r, "secret") || !strings.Contains(r, "DELIVERYSIM_PG_DSN='postgres://u@h/db'") || !strings.Contains(r, "PGPASSWORD") {
		t.Errorf("reproduce line %q", r)
	}
}

// sweep --resources adds the process's resources; without it the report
// has none, so the same seeds still give the same report.
func TestSweepResources(t *testing.T) {
	code, out, errS := cli(t, nil, "sweep", "--seeds", "1-3", "--parallel", "1", "--json", "--resources")
	if code != 0 {
		t.Fatalf("sweep --resources: exit %d: %s", code, errS)
	}
	var rep sweepReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Resources
	if r == nil || r.MaxRSSBytes <= 0 || r.Seconds <= 0 || r.SeedsPerSecond <= 0 || r.Parallel != 1 {
		t.Fatalf("sweep --resources: resources %+v, want a peak RSS, seconds, seeds/s and parallel 1", r)
	}
	_, out, _ = cli(t, nil, "sweep", "--seeds", "1-3", "--parallel", "1", "--json")
	if strings.Contains(out, `"resources"`) {
		t.Fatalf("sweep without --resources reports resources:\n%s", out)
	}
}

package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/triage"
)

// TestTriageBinary runs triage through the built binary on real sweep
// reports: the reference engine and the delete-before-send variant over
// the same seeds, whole and in shards.
func TestTriageBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs six small sweeps")
	}
	dir := t.TempDir()
	bin := buildDeliverysim(t, dir)
	path := func(name string) string { return filepath.Join(dir, name) }
	// write runs the binary and keeps its stdout in dir/name.
	write := func(name string, wantCode int, args ...string) {
		t.Helper()
		code, out, errOut := runBinary(t, nil, bin, args...)
		if code != wantCode {
			t.Fatalf("%v: exit %d, want %d\n%s", args, code, wantCode, errOut)
		}
		if err := os.WriteFile(path(name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const seeds = "1-30"
	write("clean.json", 0, "sweep", "--seeds", seeds, "--json", "--parallel", "2")
	write("bug.json", 1, "sweep", "--seeds", seeds, "--json", "--parallel", "2", "--bugs", "delete-before-send")
	for _, sh := range []string{"1", "2"} {
		write("clean-"+sh+".json", 0, "sweep", "--seeds", seeds, "--json", "--parallel", "2", "--shard", sh+"/2")
		write("bug-"+sh+".json", 1, "sweep", "--seeds", seeds, "--json", "--parallel", "2", "--shard", sh+"/2", "--bugs", "delete-before-send")
	}
	write("clean-merged.json", 0, "merge", "--json", path("clean-1.json"), path("clean-2.json"))
	write("bug-merged.json", 1, "merge", "--json", path("bug-1.json"), path("bug-2.json"))

	tri := func(wantCode int, env []string, args ...string) (triage.Report, string) {
		t.Helper()
		code, out, errOut := runBinary(t, env, bin, append([]string{"triage", "--json"}, args...)...)
		if code != wantCode {
			t.Fatalf("triage %v: exit %d, want %d\n%s", args, code, wantCode, errOut)
		}
		rep := decode[triage.Report](t, out)
		if rep.SchemaVersion != schemaVersion || rep.Kind != "triage" {
			t.Fatalf("triage --json: schema_version %d, kind %q", rep.SchemaVersion, rep.Kind)
		}
		return rep, errOut
	}

	t.Run("a planted bug is new and fails the run", func(t *testing.T) {
		junit := path("triage.xml")
		rep, errOut := tri(1, []string{"GITHUB_ACTIONS=true"}, path("clean.json"), path("bug.json"), "--junit", junit)
		if rep.Counts[triage.New] == 0 || rep.Counts[triage.Resolved] != 0 || rep.Counts[triage.Ongoing] != 0 || !rep.Failed {
			t.Fatalf("counts %v failed %v; want new findings only", rep.Counts, rep.Failed)
		}
		if len(rep.Findings[triage.New]) != rep.Counts[triage.New] {
			t.Errorf("%d new findings listed, %d counted", len(rep.Findings[triage.New]), rep.Counts[triage.New])
		}
		for _, f := range rep.Findings[triage.New] {
			if f.Seed == nil || !strings.Contains(f.Reproduce, "--bugs delete-before-send") {
				t.Errorf("new finding %s: no seed, or a reproduce line without the variant: %q", f.ID(), f.Reproduce)
			}
		}
		data, err := os.ReadFile(junit)
		if err != nil {
			t.Fatal(err)
		}
		var x xunitSuites
		if err := xml.Unmarshal(data, &x); err != nil {
			t.Fatal(err)
		}
		if x.Failures != rep.Counts[triage.New] || x.Tests != x.Failures {
			t.Errorf("junit: %d tests, %d failures; want one failing case per new finding (%d)", x.Tests, x.Failures, rep.Counts[triage.New])
		}
		if n := strings.Count(errOut, "::error "); n != min(maxAnnotations, rep.Counts[triage.New]) {
			t.Errorf("%d annotations; want %d\n%s", n, min(maxAnnotations, rep.Counts[triage.New]), errOut)
		}
	})

	t.Run("the fix resolves them and passes", func(t *testing.T) {
		rep, _ := tri(0, nil, path("bug.json"), path("clean.json"))
		if rep.Counts[triage.Resolved] == 0 || rep.Counts[triage.New] != 0 || rep.Failed {
			t.Fatalf("counts %v failed %v; want resolved findings only", rep.Counts, rep.Failed)
		}
		// --fail-on chooses: resolved findings can fail a run too.
		tri(1, nil, path("bug.json"), path("clean.json"), "--fail-on", "resolved")
	})

	t.Run("shards give the same triage as the whole sweep", func(t *testing.T) {
		whole, _ := tri(1, nil, path("clean.json"), path("bug.json"))
		merged, _ := tri(1, nil, path("clean-merged.json"), path("bug-merged.json"))
		shards, _ := tri(1, nil, path("clean-merged.json"), path("bug-1.json"), path("bug-2.json"))
		for name, r := range map[string]triage.Report{"merged": merged, "shards": shards} {
			if !reflect.DeepEqual(r.Findings, whole.Findings) || !reflect.DeepEqual(r.Counts, whole.Counts) {
				t.Errorf("%s: counts %v; the whole sweep's %v", name, r.Counts, whole.Counts)
			}
		}
		code, _, errOut := runBinary(t, nil, bin, "triage", path("clean-1.json"), path("bug.json"))
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "merge") {
			t.Errorf("a shard as the baseline: exit %d, %q; want one line, exit 2, saying to merge", code, errOut)
		}
	})

	t.Run("a finding resolved before that fails again is regressed", func(t *testing.T) {
		code, out, errOut := runBinary(t, nil, bin, "triage", "--json", path("clean.json"), path("bug.json"))
		if code != 1 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if err := os.WriteFile(path("night1.json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = runBinary(t, nil, bin, "triage", "--json", path("night1.json"), path("clean.json"))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if err := os.WriteFile(path("night2.json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		night2 := decode[triage.Report](t, out)
		rep, _ := tri(1, nil, path("night2.json"), path("bug.json"))
		if rep.Counts[triage.Regressed] != night2.Counts[triage.Resolved] || rep.Counts[triage.Regressed] == 0 || rep.Counts[triage.New] != 0 {
			t.Errorf("counts %v; want every finding night 2 resolved (%d) regressed", rep.Counts, night2.Counts[triage.Resolved])
		}
		// And the first night's failures, still failing, are ongoing.
		rep, _ = tri(0, nil, path("night1.json"), path("bug.json"))
		if rep.Counts[triage.Ongoing] == 0 || rep.Counts[triage.New] != 0 {
			t.Errorf("counts %v; want ongoing only", rep.Counts)
		}
	})

	t.Run("a seed that both passes and fails in the new runs is flaky", func(t *testing.T) {
		rep, _ := tri(0, nil, path("clean.json"), path("clean.json"), path("bug.json"))
		if rep.Counts[triage.Flaky] == 0 || rep.Counts[triage.New] != 0 {
			t.Errorf("counts %v; want flaky only", rep.Counts)
		}
	})

	t.Run("reports that do not compare are refused on one line", func(t *testing.T) {
		write("nofaults.json", 0, "sweep", "--seeds", "1-3", "--json", "--faults", "none")
		write("scenarios.json", 0, "scenarios", "--json", "--no-run")
		for _, args := range [][]string{
			{path("clean.json"), path("nofaults.json")},   // other settings
			{path("clean.json"), path("scenarios.json")},  // other kind
			{path("clean.json"), path("night-none.json")}, // no such file
			{path("clean.json")},                          // no new report
			{path("clean.json"), path("bug.json"), "--fail-on", "everything"},
		} {
			code, _, errOut := runBinary(t, nil, bin, append([]string{"triage"}, args...)...)
			if code != 2 || strings.Count(errOut, "\n") != 1 {
				t.Errorf("triage %v: exit %d, %q; want one line and exit 2", args, code, errOut)
			}
		}
	})
}

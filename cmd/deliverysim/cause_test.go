package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCauseBinary runs cause through the built binary: its JSON, its
// independence from --parallel, its refusals, the HTML mark, and Ctrl-C.
func TestCauseBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := builtCLI(t)
	type causeJSON struct {
		SchemaVersion      int    `json:"schema_version"`
		Invariant          string `json:"invariant"`
		DecisiveStep       *int64 `json:"decisive_step"`
		FirstViolationStep *int64 `json:"first_violation_step"`
		BugActsStep        *int64 `json:"bug_acts_step"`
		Sealed             bool   `json:"sealed"`
		Trials             int    `json:"trials"`
		Runs               int    `json:"runs"`
		After              struct {
			Runs, Failed int
		} `json:"after"`
		Before *struct {
			Step         int64
			Runs, Failed int
		} `json:"before"`
		Records []struct{ Text string } `json:"records"`
		Probes  []json.RawMessage       `json:"probes"`
	}
	var outs []string
	for _, par := range []string{"1", "3"} {
		code, out, errOut := runBinary(t, nil, bin, "cause", "--seed", "5", "--bugs", "delete-before-send", "--json", "--trials", "8", "--parallel", par)
		if code != 0 {
			t.Fatalf("--parallel %s: exit %d\n%s", par, code, errOut)
		}
		if !strings.Contains(errOut, "cause progress") {
			t.Errorf("no progress on stderr:\n%s", errOut)
		}
		r := decode[causeJSON](t, out)
		if r.SchemaVersion != schemaVersion || r.DecisiveStep == nil || r.FirstViolationStep == nil || r.BugActsStep == nil {
			t.Fatalf("fields missing: %s", out)
		}
		if *r.DecisiveStep > *r.FirstViolationStep || *r.DecisiveStep < *r.BugActsStep || !r.Sealed {
			t.Errorf("decisive step %d, first violation %d, the variant acted at %d", *r.DecisiveStep, *r.FirstViolationStep, *r.BugActsStep)
		}
		if r.After.Runs != 8 || r.After.Failed != 8 || r.Before == nil || r.Before.Runs != 8 || r.Before.Failed == 8 || len(r.Records) == 0 {
			t.Errorf("after %+v before %+v records %d; want 8 of 8 failing after, some passing before", r.After, r.Before, len(r.Records))
		}
		// Everything but the wall time and --parallel itself is the same.
		var m map[string]any
		_ = json.Unmarshal([]byte(out), &m)
		delete(m, "seconds")
		delete(m, "parallel")
		b, _ := json.Marshal(m)
		outs = append(outs, string(b))
	}
	if outs[0] != outs[1] {
		t.Errorf("--parallel 1 and 3 disagree:\n%s\n%s", outs[0], outs[1])
	}

	code, out, errOut := runBinary(t, nil, bin, "cause", "--scenario", "crash-between-delete-and-send", "--bugs", "delete-before-send", "--trials", "4")
	if code != 0 || !strings.Contains(out, "decisive step") || !strings.Contains(out, "4 of 4 continuations fail") {
		t.Errorf("scenario: exit %d\n%s\n%s", code, out, errOut)
	}

	html := filepath.Join(t.TempDir(), "r.html")
	if code, _, errOut := runBinary(t, nil, bin, "cause", "--seed", "4", "--bugs", "delete-before-send", "--trials", "4", "--html", html); code != 0 {
		t.Fatalf("--html: exit %d %s", code, errOut)
	}
	if page, err := os.ReadFile(html); err != nil || !strings.Contains(string(page), `id="decisive"`) {
		t.Errorf("the HTML report does not mark the decisive step (%v)", err)
	}

	for _, args := range [][]string{
		{"cause", "--seed", "1"}, // passes: nothing to explain
		{"cause"},
		{"cause", "--seed", "1", "--scenario", "x"},
		{"cause", "--seed", "1", "--trials", "1"},
		{"cause", "--seed", "x"},
		{"cause", "--seed", "1", "--bugs", "no-such-bug"},
	} {
		code, _, errOut := runBinary(t, nil, bin, args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want one line and exit 2", args, code, errOut)
		}
	}

	runSignalCases(t, bin, []sigCase{{name: "cause",
		args:  []string{"cause", "--seed", "1", "--bugs", "no-requeue-on-failure", "--trials", "1000", "--parallel", "2", "--json"},
		ready: hasLine("cause progress"), settle: 200 * time.Millisecond, json: true}})
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Issue 38: `deliverysim certify` on Postgres ignored SIGINT and SIGTERM
// (still running 120 s after Ctrl-C, nothing printed, a schema left per
// try), and a conformance.Main program with pgcert died of the signal,
// printing nothing and leaving its schema. Both now exit 130 with the
// report of what ran (text or --json) and drop every schema they made.
// Each is the built binary, signalled as a user's Ctrl-C would be.
func TestCertifyStopsOnSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries: not in -short")
	}
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find processes left behind")
	}
	dsn := pgtest.DSN(t)
	bin := builtCLI(t)
	pgmain := filepath.Join(t.TempDir(), "pgmain")
	if err := goBuild(pgmain, "./testdata/pgmain"); err != nil {
		t.Fatal(err)
	}
	// Busy once a second schema of the process exists: every check opens
	// its own, so the first check has finished and the report must carry
	// its verdict. Polled from here, not timed.
	seen := map[int]map[string]bool{}
	secondCheck := func(pid int) bool {
		if seen[pid] == nil {
			seen[pid] = map[string]bool{}
		}
		for _, s := range schemasOfPid(t, dsn, pid) {
			seen[pid][s] = true
		}
		return len(seen[pid]) >= 2
	}
	noSchemaLeft := func(t *testing.T, pid int, _ string) {
		if left := schemasOfPid(t, dsn, pid); len(left) > 0 {
			t.Errorf("schemas left behind: %v", left)
		}
	}
	text := func(t *testing.T, out string) {
		for _, want := range []string{"\nPASS ", "\nINTERRUPTED ", "\nNOT RUN ", "verdict: INTERRUPTED ("} {
			if !strings.Contains(out, want) {
				t.Errorf("the partial report lacks %q:\n%s", want, tail(out, 15))
			}
		}
	}
	asJSON := func(t *testing.T, out string) {
		var cert conformance.Certificate
		if err := json.Unmarshal([]byte(out), &cert); err != nil {
			t.Fatalf("stdout is not a certificate: %v\n%.500s", err, out)
		}
		got := map[conformance.Status]int{}
		for _, r := range cert.Results {
			got[r.Status]++
		}
		if !cert.Interrupted || cert.Passed || got[conformance.Pass] == 0 || got[conformance.NotRun] == 0 || got[conformance.Interrupted] > 1 {
			t.Errorf("interrupted %v, passed %v, statuses %v; want interrupted, not passed, some passed, some not run, at most one cut short",
				cert.Interrupted, cert.Passed, got)
		}
	}
	env := []string{"DELIVERYSIM_PG_DSN=" + dsn}
	// The bound is generous for a loaded machine; the 5 s is
	// measured by hand.
	const budget = time.Minute
	runSignalCases(t, bin, []sigCase{
		{name: "certify", args: []string{"certify", "--dsn", dsn}, busy: secondCheck, budget: budget, check: noSchemaLeft, report: text},
		{name: "certify-json", args: []string{"certify", "--dsn", dsn, "--json"}, busy: secondCheck, budget: budget, check: noSchemaLeft, json: true, report: asJSON},
	})
	runSignalCases(t, pgmain, []sigCase{
		{name: "main", env: env, busy: secondCheck, budget: budget, check: noSchemaLeft, report: text},
		{name: "main-json", args: []string{"--json"}, env: env, busy: secondCheck, budget: budget, check: noSchemaLeft, json: true, report: asJSON},
	})
}

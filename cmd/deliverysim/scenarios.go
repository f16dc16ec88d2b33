package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/scenarios"
)

// scenarioRow is one library scenario in `deliverysim scenarios --json`.
type scenarioRow struct {
	Name      string            `json:"name"`
	Title     string            `json:"title"`
	Source    string            `json:"source"`
	Path      string            `json:"path"`
	Catches   []scenarios.Catch `json:"catches"`
	Expected  []string          `json:"expected_violations"`
	Ran       bool              `json:"ran"`
	Got       []string          `json:"got_violations,omitempty"`
	Passed    bool              `json:"passed"`
	Note      string            `json:"note,omitempty"`
	Reproduce string            `json:"reproduce"`
}

// scenariosReport is the JSON of `deliverysim scenarios`.
type scenariosReport struct {
	SchemaVersion int           `json:"schema_version"`
	Scenarios     []scenarioRow `json:"scenarios"`
}

// mutantsReport is the JSON of `deliverysim mutants`.
type mutantsReport struct {
	SchemaVersion int                      `json:"schema_version"`
	Variants      []scenarios.MutantReport `json:"variants"`
}

// cmdScenarios lists the scenario library and runs each scenario on the
// engine its file configures (the reference engine), checking the outcome
// it expects.
func (a *app) cmdScenarios(args []string) (int, error) {
	fs := newFlagSet("scenarios", a.stderr)
	jsonOut := fs.Bool("json", false, "print a JSON report on stdout")
	noRun := fs.Bool("no-run", false, "only list the scenarios; do not run them")
	junit := fs.String("junit", "", "also write a JUnit XML report (one test case per scenario) to this file")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *junit != "" {
		if err := checkWritableFile("--junit", *junit); err != nil {
			return 2, usagef("%v", err)
		}
	}
	lib, err := scenarios.All()
	if err != nil {
		return 2, err
	}
	rows := make([]scenarioRow, 0, len(lib))
	failed := 0
	start := time.Now()
	var cases []xunitCase
	for _, s := range lib {
		caseStart := time.Now()
		row := scenarioRow{Name: s.Name, Title: s.Title, Source: s.Source, Path: s.Path,
			Catches: s.Catches, Expected: s.Expect.Violations,
			Reproduce: selfCommand() + " run --scenario " + s.Name}
		if row.Catches == nil {
			row.Catches = []scenarios.Catch{}
		}
		if row.Expected == nil {
			row.Expected = []string{}
		}
		if !*noRun {
			r, err := s.Run()
			if err != nil {
				return 2, fmt.Errorf("scenario %s: %w", s.Name, err)
			}
			row.Ran = true
			row.Got = scenarios.Invariants(r)
			row.Passed, row.Note = s.Matches(r)
			if !row.Passed {
				failed++
				a.annotate(annotation{file: s.Path, line: 1, title: "deliverysim: scenario " + s.Name + " does not match its expectation", msg: row.Note + "\nreproduce: " + row.Reproduce})
			}
			tc := xunitCase{Classname: "deliverysim.scenarios", Name: s.Name, Time: seconds(time.Since(caseStart))}
			if !row.Passed {
				tc.Failure = &xunitMessage{Message: row.Note, Type: "expectation", Text: "reproduce: " + row.Reproduce}
			}
			cases = append(cases, tc)
		}
		rows = append(rows, row)
	}
	if *junit != "" {
		if *noRun {
			return 2, usagef("--junit needs the scenarios to run; drop --no-run")
		}
		if err := writeJUnit(*junit, xunitSuites{Name: "deliverysim scenarios", Suites: []xunitSuite{suite("scenarios", time.Since(start), cases)}}); err != nil {
			return 2, fmt.Errorf("--junit: %v", err)
		}
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, scenariosReport{SchemaVersion: schemaVersion, Scenarios: rows}); err != nil {
			return 2, err
		}
	} else {
		printScenarios(a.stdout, rows, !*noRun)
	}
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}

func printScenarios(w io.Writer, rows []scenarioRow, ran bool) {
	for _, r := range rows {
		verdict := ""
		if ran {
			verdict = "PASS  "
			if !r.Passed {
				verdict = "FAIL  "
			}
		}
		fmt.Fprintf(w, "%s%-40s %s\n", verdict, r.Name, r.Title)
		pad := strings.Repeat(" ", len(verdict))
		fmt.Fprintf(w, "%s  source: %s\n", pad, r.Source)
		if len(r.Catches) > 0 {
			var cs []string
			for _, c := range r.Catches {
				cs = append(cs, c.Bug+" -> "+c.Invariant)
			}
			fmt.Fprintf(w, "%s  catches: %s\n", pad, strings.Join(cs, "; "))
		}
		if ran && !r.Passed {
			fmt.Fprintf(w, "%s  %s\n", pad, r.Note)
		}
	}
	if ran {
		passed := 0
		for _, r := range rows {
			if r.Passed {
				passed++
			}
		}
		fmt.Fprintf(w, "\n%d scenarios, %d pass on the reference engine, %d fail\n", len(rows), passed, len(rows)-passed)
		fmt.Fprintln(w, "run one: "+selfCommand()+" run --scenario NAME [--bugs BUG]")
	}
}

// cmdMutants runs every known-bug variant against its scenarios and a
// blind random sweep, and fails if any variant escapes either.
func (a *app) cmdMutants(args []string) (int, error) {
	fs := newFlagSet("mutants", a.stderr)
	jsonOut := fs.Bool("json", false, "print a JSON report (one object per variant) on stdout")
	junit := fs.String("junit", "", "also write a JUnit XML report (one test case per known-bug variant) to this file")
	seeds := fs.Int("seeds", 300, "the blind sweep tries at most this many seeds per variant (from --first-seed), stopping at the first failure (1 to 1000000)")
	first := fs.Uint64("first-seed", 1, "first seed of the blind sweep")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds simulated at once (1 to 1024)")
	only := fs.String("only", "", "comma-separated variants to check (default: all)")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *seeds < 1 || *seeds > 1_000_000 {
		return 2, usagef("--seeds %d is outside [1, 1000000]", *seeds)
	}
	if *junit != "" {
		if err := checkWritableFile("--junit", *junit); err != nil {
			return 2, usagef("%v", err)
		}
	}
	if *parallel < 1 || *parallel > 1024 {
		return 2, usagef("--parallel %d is outside [1, 1024]", *parallel)
	}
	opts := scenarios.MutantOptions{FirstSeed: *first, Seeds: *seeds, Parallel: *parallel}
	if *only != "" {
		for _, n := range strings.Split(*only, ",") {
			n = strings.TrimSpace(n)
			if _, ok := scenarios.VariantNamed(n); !ok {
				return 2, usagef("--only: unknown variant %q; known: %s", n, strings.Join(scenarios.VariantNames(), ", "))
			}
			opts.Only = append(opts.Only, n)
		}
	}
	start := time.Now()
	reps, err := scenarios.Mutants(opts)
	if err != nil {
		return 2, err
	}
	a.log.Info("mutants checked", "variants", len(reps), "elapsed", time.Since(start).Round(time.Millisecond))
	escaped := 0
	var cases []xunitCase
	for _, r := range reps {
		tc := xunitCase{Classname: "deliverysim.mutants", Name: r.Name, Time: fmt.Sprintf("%.3f", r.SecondsToFirstFailure)}
		switch {
		case r.Error != "":
			tc.Error = &xunitMessage{Message: r.Error, Type: "error"}
		case r.Escaped():
			msg := fmt.Sprintf("known bug %s escaped: caught by a blind sweep %v, by its scenarios %v", r.Name, r.Caught, r.CaughtByScenario)
			tc.Failure = &xunitMessage{Message: msg, Type: "escaped", Text: "check: go run ./cmd/deliverysim mutants --only " + r.Name}
			a.annotate(annotation{title: "deliverysim: known bug " + r.Name + " escaped the harness", msg: msg})
		}
		cases = append(cases, tc)
		if r.Escaped() || r.Error != "" {
			escaped++
		}
	}
	if *junit != "" {
		if err := writeJUnit(*junit, xunitSuites{Name: "deliverysim mutants", Suites: []xunitSuite{suite("mutants", time.Since(start), cases)}}); err != nil {
			return 2, fmt.Errorf("--junit: %v", err)
		}
	}
	if *jsonOut {
		if reps == nil {
			reps = []scenarios.MutantReport{}
		}
		if err := writeJSON(a.stdout, mutantsReport{SchemaVersion: schemaVersion, Variants: reps}); err != nil {
			return 2, err
		}
	} else {
		printMutants(a.stdout, reps, opts, time.Since(start))
	}
	if escaped > 0 {
		return 1, nil
	}
	return 0, nil
}

func printMutants(w io.Writer, reps []scenarios.MutantReport, opts scenarios.MutantOptions, took time.Duration) {
	width := len("VARIANT")
	for _, r := range reps {
		width = max(width, len(r.Name))
	}
	fmt.Fprintf(w, "%-*s %-7s %-9s %5s %6s %8s  %-26s %s\n", width, "VARIANT", "SWEEP", "SCENARIO", "SEED", "SEEDS", "SECONDS", "INVARIANT", "SCENARIOS")
	caught := 0
	for _, r := range reps {
		sweep, scen := "ESCAPED", "ESCAPED"
		seed, n, secs := "-", "-", "-"
		if r.Caught {
			sweep = "caught"
			seed = fmt.Sprint(*r.FirstFailingSeed)
			n = fmt.Sprint(r.SeedsToFirstFailure)
			secs = fmt.Sprintf("%.3f", r.SecondsToFirstFailure)
		}
		if r.CaughtByScenario {
			scen = "caught"
		}
		if !r.Escaped() {
			caught++
		}
		var names []string
		for _, s := range r.Scenarios {
			mark := ""
			if !s.Caught {
				mark = " (missed)"
			}
			names = append(names, s.Scenario+mark)
		}
		inv := r.Invariant
		if inv == "" {
			inv = "-"
		}
		fmt.Fprintf(w, "%-*s %-7s %-9s %5s %6s %8s  %-26s %s\n", width, r.Name, sweep, scen, seed, n, secs, inv, strings.Join(names, ", "))
		if r.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", r.Error)
		}
	}
	fmt.Fprintf(w, "\n%d of %d variants caught by their scenarios and by a blind sweep (at most %d seeds from %d) in %s\n",
		caught, len(reps), opts.Seeds, opts.FirstSeed, took.Round(time.Millisecond))
	if caught < len(reps) {
		fmt.Fprintln(w, "verdict: FAIL (a known bug escaped the harness)")
	} else {
		fmt.Fprintln(w, "verdict: PASS")
	}
}

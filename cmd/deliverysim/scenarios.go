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

// cmdScenarios lists the scenario library and runs each scenario on the
// engine its file configures (the reference engine), checking the outcome
// it expects.
func (a *app) cmdScenarios(args []string) (int, error) {
	fs := newFlagSet("scenarios", a.stderr)
	jsonOut := fs.Bool("json", false, "print a JSON array on stdout")
	noRun := fs.Bool("no-run", false, "only list the scenarios; do not run them")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	lib, err := scenarios.All()
	if err != nil {
		return 2, err
	}
	rows := make([]scenarioRow, 0, len(lib))
	failed := 0
	for _, s := range lib {
		row := scenarioRow{Name: s.Name, Title: s.Title, Source: s.Source, Path: s.Path,
			Catches: s.Catches, Expected: s.Expect.Violations,
			Reproduce: "go run ./cmd/deliverysim run --scenario " + s.Name}
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
			}
		}
		rows = append(rows, row)
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, rows); err != nil {
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
		fmt.Fprintln(w, "run one: go run ./cmd/deliverysim run --scenario NAME [--bugs BUG]")
	}
}

// cmdMutants runs every known-bug variant against its scenarios and a
// blind random sweep, and fails if any variant escapes either.
func (a *app) cmdMutants(args []string) (int, error) {
	fs := newFlagSet("mutants", a.stderr)
	jsonOut := fs.Bool("json", false, "print a JSON array (one object per variant) on stdout")
	seeds := fs.Int("seeds", 300, "the blind sweep tries at most this many seeds per variant (from --first-seed), stopping at the first failure")
	first := fs.Uint64("first-seed", 1, "first seed of the blind sweep")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds simulated at once")
	only := fs.String("only", "", "comma-separated variants to check (default: all)")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *seeds < 1 || *parallel < 1 {
		return 2, usagef("--seeds and --parallel must be at least 1")
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
	for _, r := range reps {
		if r.Escaped() || r.Error != "" {
			escaped++
		}
	}
	if *jsonOut {
		if err := writeJSON(a.stdout, reps); err != nil {
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

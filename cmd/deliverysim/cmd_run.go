package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/report"
	"github.com/deliverysim/deliverysim/scenarios"
	"github.com/deliverysim/deliverysim/sim"
)

// invDeterminism is the pseudo-invariant a determinism check reports.
const invDeterminism = "determinism"

// runReport is the JSON of `deliverysim run`.
type runReport struct {
	SchemaVersion int                `json:"schema_version"`
	Seed          uint64             `json:"seed"`
	Backend       string             `json:"backend"`
	TraceHash     string             `json:"trace_hash"`
	TraceLines    int                `json:"trace_lines"`
	Violations    []oracle.Violation `json:"violations"`
	Invariants    map[string]string  `json:"invariants"` // invariant -> "pass" | "fail"
	Faults        map[string]int     `json:"faults"`
	Counters      sim.Counters       `json:"counters"`
	Stats         oracle.CheckStats  `json:"stats"`
	Params        oracle.CheckParams `json:"params"` // the bounds the invariants were checked against
	Plan          string             `json:"plan"`
	Bugs          []string           `json:"bugs"`
	Quiescent     bool               `json:"quiescent"`
	SimulatedNs   int64              `json:"simulated_ns"`
	Deterministic *bool              `json:"deterministic,omitempty"`
	Reproduce     string             `json:"reproduce,omitempty"`
	// Scenario runs only: the scenario, and whether the outcome is the one
	// its file expects.
	Scenario string       `json:"scenario,omitempty"`
	Expected *expectation `json:"expected,omitempty"`
	// Minimized is the smaller scenario written after a failure.
	Minimized *minReport `json:"minimized,omitempty"`
	// Interrupted: SIGINT or SIGTERM stopped the command at Stage (the
	// determinism re-run, minimizing, reporting); what follows the stage
	// is missing.
	Interrupted bool   `json:"interrupted,omitempty"`
	Stage       string `json:"stage,omitempty"`
}

type expectation struct {
	Violations []string `json:"violations"`
	Matches    bool     `json:"matches"`
	Note       string   `json:"note,omitempty"`
}

type minReport struct {
	Path string `json:"path"` // absolute: the replay line works from any folder
	// Replay is the command that replays it, on the in-memory store
	// where it was reduced; Note says so when the run was not.
	Replay    string           `json:"replay"`
	Note      string           `json:"note,omitempty"`
	Invariant string           `json:"invariant"`
	Before    scenarios.Size   `json:"before"`
	After     scenarios.Size   `json:"after"`
	Runs      int              `json:"runs"`
	Seconds   float64          `json:"seconds"`
	First     oracle.Violation `json:"first_violation"`
}

func (a *app) cmdRun(args []string) (int, error) {
	fs := newFlagSet("run", a.stderr)
	var c common
	c.register(fs, true)
	seedS := fs.String("seed", "", "the seed to simulate")
	scenarioS := fs.String("scenario", "", "run a scenario: a file, or the name of a library scenario (deliverysim scenarios lists them)")
	noMin := fs.Bool("no-minimize", false, "on failure, do not write a minimized scenario")
	minDir := fs.String("min-dir", "", "directory for minimized scenarios (default: $DELIVERYSIM_MIN_DIR, else "+defaultMinDir()+")")
	htmlS := fs.String("html", "", "write a self-contained HTML report of the run (timeline, violations, verdicts) to FILE")
	// A report that cannot be written is refused before the run, not
	// after minutes of it.
	htmlCheck := func() error {
		if *htmlS == "" {
			return nil
		}
		return checkWritableFile("--html", *htmlS)
	}
	t, r, err := a.runOnce(fs, &c, args, seedS, scenarioS, htmlCheck)
	if err != nil {
		if t != nil && a.interrupted() {
			return a.runInterrupted(t, nil, "simulating")
		}
		return 2, err
	}
	rep := buildRunReport(&c, r)
	// The scenario's own engine.bugs count as much as --bugs: a minimized
	// scenario of a known-bug run must not read as a reference failure.
	rep.Bugs = t.bugs()
	if t.sc != nil {
		rep.Scenario = t.ref
		ok, note := t.sc.Matches(r)
		rep.Expected = &expectation{Violations: slices.Clone(t.sc.Expect.Violations), Matches: ok, Note: note}
		if rep.Expected.Violations == nil {
			rep.Expected.Violations = []string{}
		}
	}
	if c.determin {
		again, err := t.run()
		if err != nil {
			if a.interrupted() {
				return a.runInterrupted(t, &rep, "determinism re-run")
			}
			return 2, err
		}
		same := again.TraceHash == r.TraceHash
		rep.Deterministic = &same
		if !same {
			rep.Violations = append(rep.Violations, oracle.Violation{
				Invariant: invDeterminism, Time: sim.Epoch, Detail: fmt.Sprintf(
					"two runs of seed %d gave different traces: %s then %s (deliverysim trace --seed %d twice and diff them)",
					t.seed, r.TraceHash, again.TraceHash, t.seed),
			})
			rep.Invariants[invDeterminism] = "fail"
		} else {
			rep.Invariants[invDeterminism] = "pass"
		}
	}
	failed := len(rep.Violations) > 0
	if failed {
		rep.Reproduce = t.reproduce()
	}
	// A failure is reduced to a smaller scenario, unless the scenario run
	// is itself a reproduction that fails exactly as it says it does.
	if failed && len(r.Violations) > 0 && !*noMin && !(rep.Expected != nil && rep.Expected.Matches) {
		dir := *minDir
		if dir == "" {
			dir = a.getenv("DELIVERYSIM_MIN_DIR")
		}
		if dir == "" {
			dir = defaultMinDir()
		}
		// A directory per run: two runs of the same seed (another engine
		// version, another --bugs) must not overwrite each other's file.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			a.log.Warn("could not create the minimized scenarios' directory", "dir", dir, "err", err)
		} else if dir, err = os.MkdirTemp(dir, fmt.Sprintf("seed-%d-%s-", t.seed, time.Now().UTC().Format("20060102T150405Z"))); err != nil {
			a.log.Warn("could not create a directory for the minimized scenario", "err", err)
		} else if m, err := a.minimize(&c, t, r, dir, ""); err != nil {
			// An interrupted minimization leaves no half-filled directory.
			os.RemoveAll(dir)
			if a.interrupted() {
				return a.runInterrupted(t, &rep, "minimizing")
			}
			a.log.Warn("could not minimize the failing run", "err", err)
		} else {
			rep.Minimized = m
		}
	}
	if a.interrupted() {
		return a.runInterrupted(t, &rep, "reporting")
	}
	if *htmlS != "" {
		info := report.Info{Bugs: rep.Bugs, Backend: c.backend, Reproduce: rep.Reproduce}
		if err := writeHTMLFile(*htmlS, r, info); err != nil {
			return 2, err
		}
	}
	if c.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printRun(a.stdout, rep)
	}
	if failed {
		if c.json {
			// Keep stdout pure JSON; the command and the file still go to
			// the user.
			fmt.Fprintln(a.stderr, "reproduce: "+rep.Reproduce)
			if rep.Minimized != nil {
				fmt.Fprintln(a.stderr, "minimized: "+rep.Minimized.Path)
			}
		}
		return 1, nil
	}
	return 0, nil
}

// interruptedRun is the JSON of a run stopped by SIGINT or SIGTERM before
// its simulation ended: there is no verdict to report, only what was asked.
type interruptedRun struct {
	SchemaVersion int      `json:"schema_version"`
	Seed          uint64   `json:"seed"`
	Scenario      string   `json:"scenario,omitempty"`
	Backend       string   `json:"backend"`
	Bugs          []string `json:"bugs"`
	Interrupted   bool     `json:"interrupted"`
	Stage         string   `json:"stage"`
	Reproduce     string   `json:"reproduce"`
}

// runInterrupted reports a run that a signal stopped at stage and returns
// exit status 130. rep is what was known by then (nil if the simulation
// itself was cut short): it is printed marked interrupted, without what
// the later stages would have added.
func (a *app) runInterrupted(t *runTarget, rep *runReport, stage string) (int, error) {
	if rep == nil {
		ir := interruptedRun{SchemaVersion: schemaVersion, Seed: t.seed, Backend: t.c.backend, Bugs: t.bugs(),
			Interrupted: true, Stage: stage, Reproduce: t.reproduce()}
		if t.sc != nil {
			ir.Scenario = t.ref
		}
		if ir.Bugs == nil {
			ir.Bugs = []string{}
		}
		if t.c.json {
			if err := writeJSON(a.stdout, ir); err != nil {
				return exitInterrupted, nil
			}
		} else {
			fmt.Fprintf(a.stdout, "seed %d on %s: interrupted while %s; no verdict\nreproduce: %s\n", t.seed, t.c.backend, stage, ir.Reproduce)
		}
		return exitInterrupted, nil
	}
	rep.Interrupted, rep.Stage = true, stage
	if rep.Reproduce == "" {
		rep.Reproduce = t.reproduce()
	}
	if t.c.json {
		_ = writeJSON(a.stdout, rep)
	} else {
		printRun(a.stdout, *rep)
		fmt.Fprintf(a.stdout, "interrupted while %s\n", stage)
	}
	return exitInterrupted, nil
}

func defaultMinDir() string { return filepath.Join(os.TempDir(), "deliverysim-min") }

// runTarget is what run and trace simulate: a seed, or a scenario.
type runTarget struct {
	a    *app
	c    *common
	seed uint64
	sc   *scenarios.Scenario
	ref  string // the --scenario argument
}

// target reads --seed / --scenario (exactly one) and the common flags.
func (a *app) target(c *common, seedS, scenarioS string) (*runTarget, error) {
	t := &runTarget{a: a, c: c}
	switch {
	case seedS != "" && scenarioS != "":
		return nil, usagef("give --seed or --scenario, not both")
	case scenarioS != "":
		if c.faultsArg != "" {
			return nil, usagef("--faults does not combine with --scenario; set faults.random or faults.schedule in the scenario file")
		}
		sc, err := scenarios.Find(scenarioS)
		if err != nil {
			return nil, usagef("%v", err)
		}
		if err := checkSingleDocument(scenarioS); err != nil {
			return nil, usagef("%v", err)
		}
		t.sc, t.ref, t.seed = sc, scenarioS, sc.Seed
	default:
		if seedS == "" {
			return nil, usagef("--seed is required (or --scenario FILE|NAME), e.g. --seed 42 or --scenario sealed-during-downtime")
		}
		seed, err := parseSeed("--seed", seedS)
		if err != nil {
			return nil, err
		}
		t.seed = seed
	}
	if err := c.finish(a); err != nil {
		return nil, err
	}
	if err := a.checkBackend(c); err != nil {
		return nil, err
	}
	return t, nil
}

// runOnce parses run's or trace's flags (args), resolves the target and
// simulates it once.
// runOnce parses the flags, checks them (check, if not nil, runs after
// parsing and before the run) and simulates the target.
func (a *app) runOnce(fs *flag.FlagSet, c *common, args []string, seedS, scenarioS *string, check func() error) (*runTarget, *sim.Result, error) {
	if err := a.parse(fs, args); err != nil {
		return nil, nil, err
	}
	t, err := a.target(c, *seedS, *scenarioS)
	if err != nil {
		return nil, nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, nil, err
		}
	}
	r, err := t.run()
	if err != nil {
		return t, nil, err
	}
	return t, r, nil
}

func (t *runTarget) run() (*sim.Result, error) {
	if t.sc == nil {
		return t.a.simulate(t.c, t.seed, traceFull)
	}
	cfg, err := t.sc.Build(t.c.bugNames...)
	if err != nil {
		return nil, err
	}
	cfg.Store = t.a.storeFactory(t.c, t.seed)
	cfg.Context = t.a.simContext(t.c)
	return sim.Run(cfg)
}

func (t *runTarget) reproduce() string {
	if t.sc == nil {
		return t.c.reproduce(t.seed)
	}
	s := selfCommand() + " run --scenario " + t.ref
	if len(t.c.bugNames) > 0 {
		s += " --bugs " + strings.Join(t.c.bugNames, ",")
	}
	return t.c.withBackend(s)
}

// bugs are every known bug the run had: the scenario's and --bugs.
func (t *runTarget) bugs() []string {
	var all []string
	if t.sc != nil {
		all = append(all, t.sc.Engine.Bugs...)
	}
	_, names, _ := scenarios.ParseBugs(append(all, t.c.bugNames...))
	return names
}

// minimize rewrites the failing run as an explicit scenario, reduces it
// while it keeps failing with its first violation's invariant, and writes
// it under dir as file (NAME.yaml when ""). Minimization always runs on
// the in-memory store, so that is where its replay line runs it.
func (a *app) minimize(c *common, t *runTarget, r *sim.Result, dir, file string) (*minReport, error) {
	start := time.Now()
	bugs := t.bugs()
	s, err := scenarios.FromResult(r, t.sc, bugs)
	if err != nil {
		return nil, err
	}
	origin := fmt.Sprintf("seed %d", t.seed)
	s.Name = fmt.Sprintf("seed-%d", t.seed)
	if t.sc != nil {
		origin, s.Name = "scenario "+t.sc.Name, t.sc.Name
	}
	if len(bugs) > 0 {
		origin += " with " + strings.Join(bugs, ",")
		s.Name += "-" + strings.Join(bugs, "-")
	}
	m, err := a.minimizeInterruptible(s, scenarios.MinimizeOptions{Invariant: r.Violations[0].Invariant})
	if err != nil {
		return nil, err
	}
	m.Describe(origin)
	if file == "" {
		file = m.Scenario.Name + ".yaml"
	}
	path, err := filepath.Abs(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	rep := &minReport{Path: path, Replay: selfCommand() + " run --scenario " + path, Invariant: m.Invariant,
		Before: m.Before, After: m.After, Runs: m.Runs, Seconds: m.Elapsed.Seconds(), First: m.First}
	notes := []string{"Replay: " + rep.Replay}
	if c.backend != "memory" {
		rep.Note = fmt.Sprintf("minimized on the in-memory store (the run was on %s): the replay runs there; add --backend %s to try it on %s", c.backend, c.backend, c.backend)
		notes = append(notes, "Note: "+rep.Note)
	}
	if err := scenarios.WriteMinimized(path, m, origin, notes...); err != nil {
		return nil, err
	}
	a.log.Debug("minimized", "path", path, "runs", m.Runs, "elapsed", time.Since(start))
	return rep, nil
}

func buildRunReport(c *common, r *sim.Result) runReport {
	rep := runReport{
		SchemaVersion: schemaVersion, Seed: r.Seed, Backend: c.backend, TraceHash: r.TraceHash, TraceLines: len(r.Trace),
		Violations: r.Violations, Invariants: map[string]string{}, Faults: faultCounts(r.Faults),
		Counters: r.Counters, Stats: r.Stats, Params: r.Params, Plan: r.Plan.String(), Bugs: c.bugNames,
		Quiescent: r.Quiescent, SimulatedNs: int64(r.End.Sub(sim.Epoch)),
	}
	if rep.Violations == nil {
		rep.Violations = []oracle.Violation{}
	}
	if rep.Bugs == nil {
		rep.Bugs = []string{}
	}
	for _, inv := range oracle.Invariants() {
		rep.Invariants[inv] = "pass"
	}
	for _, v := range r.Violations {
		rep.Invariants[v.Invariant] = "fail"
	}
	return rep
}

func faultCounts(m map[faults.Kind]int) map[string]int {
	out := map[string]int{}
	for _, k := range faults.All() {
		out[string(k)] = m[k]
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeVersionedJSON writes v, which must encode as a JSON object, with
// "schema_version" as its first field: for reports whose type belongs to
// another package (chaos, bench peer, mutate) and so carries no version.
func writeVersionedJSON(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) < 2 || body[0] != '{' {
		return fmt.Errorf("internal: a %T report does not encode as a JSON object", v)
	}
	var flat bytes.Buffer
	fmt.Fprintf(&flat, `{"schema_version":%d`, schemaVersion)
	if len(body) > 2 {
		flat.WriteByte(',')
	}
	flat.Write(body[1:])
	var out bytes.Buffer
	if err := json.Indent(&out, flat.Bytes(), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

const maxPrintedViolations = 20

func printRun(w io.Writer, rep runReport) {
	c := rep.Counters
	if rep.Scenario != "" {
		fmt.Fprintf(w, "scenario %s (seed %d) on %s", rep.Scenario, rep.Seed, rep.Backend)
	} else {
		fmt.Fprintf(w, "seed %d on %s", rep.Seed, rep.Backend)
	}
	if len(rep.Bugs) > 0 {
		fmt.Fprintf(w, " with bugs %s", strings.Join(rep.Bugs, ","))
	}
	fmt.Fprintf(w, ": %s simulated (%s)\n", time.Duration(rep.SimulatedNs).Round(time.Second),
		map[bool]string{true: "quiescent", false: "stopped at the liveness deadline"}[rep.Quiescent])
	fmt.Fprintf(w, "  events %d, obligations %d, sends %d, deliveries %d, duplicates %d, retries %d,\n",
		c.Events, c.Obligations, c.Sends, c.Deliveries, c.Duplicates, c.Retries)
	fmt.Fprintf(w, "  dead letters %d, retention drops %d, rejected %d, crashes %d, beyond-window duplicates %d\n",
		c.DeadLetters, c.RetentionDrops, c.Rejected, c.Crashes, rep.Stats.BeyondWindowDuplicates)
	fmt.Fprintf(w, "plan: %s\n", rep.Plan)
	fmt.Fprintln(w, "faults injected:")
	for _, k := range faults.All() {
		fmt.Fprintf(w, "  %-38s %d\n", k, rep.Faults[string(k)])
	}
	fmt.Fprintf(w, "trace: %d lines, sha256 %s\n", rep.TraceLines, rep.TraceHash)
	fmt.Fprintln(w, "invariants:")
	invs := oracle.Invariants()
	if rep.Deterministic != nil {
		invs = append(invs, invDeterminism)
	}
	for _, inv := range invs {
		fmt.Fprintf(w, "  %-26s %s\n", inv, strings.ToUpper(rep.Invariants[inv]))
	}
	if e := rep.Expected; e != nil {
		if e.Matches {
			fmt.Fprintf(w, "expected outcome (%s): matches\n", describeExpect(e.Violations))
		} else {
			fmt.Fprintf(w, "expected outcome (%s): DOES NOT MATCH: %s\n", describeExpect(e.Violations), e.Note)
		}
	}
	if len(rep.Violations) == 0 {
		fmt.Fprintln(w, "verdict: PASS")
		return
	}
	fmt.Fprintf(w, "violations (%d):\n", len(rep.Violations))
	for i, v := range rep.Violations {
		if i == maxPrintedViolations {
			fmt.Fprintf(w, "  ... and %d more (--json lists them all)\n", len(rep.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
	fmt.Fprintln(w, "verdict: FAIL")
	fmt.Fprintf(w, "reproduce: %s\n", rep.Reproduce)
	if m := rep.Minimized; m != nil {
		fmt.Fprintf(w, "minimized: %s\n", m.Path)
		fmt.Fprintf(w, "  still fails with %s after %d runs (%.1fs); before: %s\n  after:  %s\n",
			m.Invariant, m.Runs, m.Seconds, m.Before, m.After)
		fmt.Fprintf(w, "  replay it: %s\n", m.Replay)
		if m.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", m.Note)
		}
	}
}

func (a *app) cmdTrace(args []string) (int, error) {
	fs := newFlagSet("trace", a.stderr)
	var c common
	c.register(fs, false)
	seedS := fs.String("seed", "", "the seed to simulate")
	scenarioS := fs.String("scenario", "", "trace a scenario (a file, or a library scenario's name)")
	out := fs.String("out", "", "write the trace to this file instead of stdout")
	t, r, err := a.runOnce(fs, &c, args, seedS, scenarioS, nil)
	if err != nil {
		if t != nil && a.interrupted() {
			// No partial trace: a cut trace would hash differently and
			// look like nondeterminism.
			fmt.Fprintf(a.stderr, "deliverysim: trace of seed %d interrupted; nothing written\n", t.seed)
			return exitInterrupted, nil
		}
		return 2, err
	}
	text := r.TraceText()
	if *out == "" {
		if _, err := a.stdout.Write(text); err != nil {
			return 2, err
		}
	} else if err := os.WriteFile(*out, text, 0o644); err != nil {
		return 2, usagef("--out: %v", err)
	}
	a.log.Info("trace written", "seed", t.seed, "lines", len(r.Trace), "sha256", r.TraceHash, "violations", len(r.Violations))
	return 0, nil
}

func describeExpect(vs []string) string {
	if len(vs) == 0 {
		return "no violation"
	}
	return "violates " + strings.Join(vs, ", ")
}

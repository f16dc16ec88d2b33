package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model"
	"github.com/deliverysim/deliverysim/sim"
)

// invDeterminism is the pseudo-invariant a determinism check reports.
const invDeterminism = "determinism"

// runReport is the JSON of `deliverysim run`.
type runReport struct {
	Seed          uint64            `json:"seed"`
	Backend       string            `json:"backend"`
	TraceHash     string            `json:"trace_hash"`
	TraceLines    int               `json:"trace_lines"`
	Violations    []model.Violation `json:"violations"`
	Invariants    map[string]string `json:"invariants"` // invariant -> "pass" | "fail"
	Faults        map[string]int    `json:"faults"`
	Counters      sim.Counters      `json:"counters"`
	Stats         model.CheckStats  `json:"stats"`
	Params        model.CheckParams `json:"params"` // the bounds the invariants were checked against
	Plan          string            `json:"plan"`
	Bugs          []string          `json:"bugs"`
	Quiescent     bool              `json:"quiescent"`
	SimulatedNs   int64             `json:"simulated_ns"`
	Deterministic *bool             `json:"deterministic,omitempty"`
	Reproduce     string            `json:"reproduce,omitempty"`
}

func (a *app) cmdRun(args []string) (int, error) {
	fs := newFlagSet("run", a.stderr)
	var c common
	c.register(fs, true)
	seedS := fs.String("seed", "", "the seed to simulate")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	seed, err := parseSeed("--seed", *seedS)
	if err != nil {
		return 2, err
	}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}
	r, err := a.simulate(&c, seed)
	if err != nil {
		return 2, err
	}
	rep := buildRunReport(&c, r)
	if c.determin {
		again, err := a.simulate(&c, seed)
		if err != nil {
			return 2, err
		}
		same := again.TraceHash == r.TraceHash
		rep.Deterministic = &same
		if !same {
			rep.Violations = append(rep.Violations, model.Violation{
				Invariant: invDeterminism, Time: sim.Epoch, Detail: fmt.Sprintf(
					"two runs of seed %d gave different traces: %s then %s (deliverysim trace --seed %d twice and diff them)",
					seed, r.TraceHash, again.TraceHash, seed),
			})
			rep.Invariants[invDeterminism] = "fail"
		} else {
			rep.Invariants[invDeterminism] = "pass"
		}
	}
	failed := len(rep.Violations) > 0
	if failed {
		rep.Reproduce = c.reproduce(seed)
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
			// Keep stdout pure JSON; the command still goes to the user.
			fmt.Fprintln(a.stderr, "reproduce: "+rep.Reproduce)
		}
		return 1, nil
	}
	return 0, nil
}

func buildRunReport(c *common, r *sim.Result) runReport {
	rep := runReport{
		Seed: r.Seed, Backend: c.backend, TraceHash: r.TraceHash, TraceLines: len(r.Trace),
		Violations: r.Violations, Invariants: map[string]string{}, Faults: faultCounts(r.Faults),
		Counters: r.Counters, Stats: r.Stats, Params: r.Params, Plan: r.Plan.String(), Bugs: c.bugNames,
		Quiescent: r.Quiescent, SimulatedNs: int64(r.End.Sub(sim.Epoch)),
	}
	if rep.Violations == nil {
		rep.Violations = []model.Violation{}
	}
	if rep.Bugs == nil {
		rep.Bugs = []string{}
	}
	for _, inv := range model.Invariants() {
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

const maxPrintedViolations = 20

func printRun(w io.Writer, rep runReport) {
	c := rep.Counters
	fmt.Fprintf(w, "seed %d on %s", rep.Seed, rep.Backend)
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
	invs := model.Invariants()
	if rep.Deterministic != nil {
		invs = append(invs, invDeterminism)
	}
	for _, inv := range invs {
		fmt.Fprintf(w, "  %-26s %s\n", inv, strings.ToUpper(rep.Invariants[inv]))
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
}

func (a *app) cmdTrace(args []string) (int, error) {
	fs := newFlagSet("trace", a.stderr)
	var c common
	c.register(fs, false)
	seedS := fs.String("seed", "", "the seed to simulate")
	out := fs.String("out", "", "write the trace to this file instead of stdout")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	seed, err := parseSeed("--seed", *seedS)
	if err != nil {
		return 2, err
	}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}
	r, err := a.simulate(&c, seed)
	if err != nil {
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
	a.log.Info("trace written", "seed", seed, "lines", len(r.Trace), "sha256", r.TraceHash, "violations", len(r.Violations))
	return 0, nil
}

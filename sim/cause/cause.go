// Package cause finds when a failing simulation became bound to fail: the
// decisive step, the earliest step after which every continuation of the
// run fails.
//
// A continuation of a run after step k is the same run (same seed, same
// workload, same engine) with its randomness re-drawn from step k+1 on
// (sim.Config.Redraw): other latencies, other fault coins, other
// production times. Re-running many continuations from step k estimates
// the probability that the run fails once its first k steps have happened.
// At the first violation that probability is 1 (the violation has been
// observed); at step 0 it is the chance the workload and engine fail at
// all. The decisive step is where it becomes 1: found by bisection between
// the two, so a few hundred runs suffice for a run of thousands of steps.
//
// The package computes only: it runs continuations through an Exec, which
// the caller may make parallel (the CLI does, with --parallel).
package cause

import (
	"errors"
	"fmt"
	"strings"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// Batch is one probe: the continuations of one step.
type Batch struct {
	Step    int64
	Configs []sim.Config
	// Fails judges one continuation's result.
	Fails func(*sim.Result) bool
	// StopAtPass: only whether every continuation fails matters, so the
	// Exec may stop at the first that passes.
	StopAtPass bool
}

// Tally is what a batch gave: how many continuations ran, how many failed.
type Tally struct {
	Runs   int `json:"runs"`
	Failed int `json:"failed"`
}

// AllFail tells whether every continuation that ran failed.
func (t Tally) AllFail() bool { return t.Runs > 0 && t.Failed == t.Runs }

// P is the estimated failure probability.
func (t Tally) P() float64 {
	if t.Runs == 0 {
		return 0
	}
	return float64(t.Failed) / float64(t.Runs)
}

// Exec runs a batch's continuations.
type Exec func(Batch) (Tally, error)

// Sequential is an Exec that runs the continuations one after another.
func Sequential(b Batch) (Tally, error) {
	var t Tally
	for _, cfg := range b.Configs {
		r, err := sim.Run(cfg)
		if err != nil {
			return t, err
		}
		t.Runs++
		if b.Fails(r) {
			t.Failed++
		} else if b.StopAtPass {
			break
		}
	}
	return t, nil
}

// Options tune Find.
type Options struct {
	// Trials is the number of continuations per probed step (default
	// DefaultTrials): a step is decisive when all of them fail.
	Trials int
	// Exec runs the probes (default Sequential).
	Exec Exec
	// Progress, if set, is told each probe once it is done.
	Progress func(Probe)
	// KeepBugs continues a known-bug variant's run with its bugs on.
	// By default continuations run the reference engine after the
	// branching step (sim.Redraw.Reference), so the decisive step is the
	// bug's action (or the fault) that sealed the failure, not step 0 of
	// a variant that fails whatever happens.
	KeepBugs bool
}

// DefaultTrials: with 24 continuations that all fail, a step whose true
// failure probability were 0.9 would pass for decisive with chance
// 0.9^24, under 8%.
const DefaultTrials = 24

// Probe is one probed step.
type Probe struct {
	Step int64 `json:"step"`
	Tally
	// Complete: every trial ran (else the probe stopped at a pass).
	Complete bool `json:"complete"`
}

// Record is one trace record of the decisive step.
type Record struct {
	Actor string `json:"actor"`
	Kind  string `json:"kind"`
	Text  string `json:"text"`
	Fault bool   `json:"fault"`
}

// Report is what Find found.
type Report struct {
	Seed uint64 `json:"seed"`
	// Invariant is the invariant of the run's first violation; a
	// continuation fails when it breaks this invariant.
	Invariant          string `json:"invariant"`
	FirstViolation     string `json:"first_violation"`
	FirstViolationStep int64  `json:"first_violation_step"`
	Steps              int64  `json:"steps"` // the run's last step
	// DecisiveStep is the earliest step found after which every
	// continuation fails; Sealed is false when not even the first
	// violation's step had all its continuations fail (the violation is
	// then judged on later events: the decisive step is reported as the
	// first violation's, with its own probability).
	DecisiveStep int64 `json:"decisive_step"`
	Sealed       bool  `json:"sealed"`
	// Records are the decisive step's trace records (the event and what
	// it did); Faults the faults injected at it.
	Records []Record `json:"records"`
	Faults  []string `json:"faults"`
	// RecordsStep is the step Records are of: the decisive step, or when
	// it left no trace record (its decision was a draw with no visible
	// effect: a fault coin that came up "no", a latency), the last step
	// before it that did.
	RecordsStep int64 `json:"records_step"`
	// Before and After are the continuations of the step before the
	// decisive one and of the decisive one; Start those of step 0.
	Before *Probe `json:"before"`
	After  Probe  `json:"after"`
	Start  Probe  `json:"start"`
	// Probes lists every probe in the order made.
	Probes  []Probe `json:"probes"`
	Runs    int     `json:"runs"` // continuations run in all
	Trials  int     `json:"trials"`
	Seconds float64 `json:"seconds"` // wall-clock time of the search, set by the caller (sim/ reads no clock)
}

// ErrPasses: the run breaks no invariant, so there is nothing to explain.
var ErrPasses = errors.New("the run breaks no invariant; cause explains a failing run")

// maxRecords bounds the records a report lists for its decisive step.
const maxRecords = 40

// Find runs base in full, then bisects for its decisive step. base's
// Redraw, trace settings and Context are Find's to set, except Context,
// which every run gets (a cancelled one abandons the search).
func Find(base sim.Config, opts Options) (*Report, error) {
	if opts.Trials <= 0 {
		opts.Trials = DefaultTrials
	}
	if opts.Exec == nil {
		opts.Exec = Sequential
	}
	full := base
	full.Redraw, full.NoTrace, full.TraceHashOnly = nil, false, false
	r0, err := sim.Run(full)
	if err != nil {
		return nil, err
	}
	first, ok := FirstViolation(r0.Violations)
	if !ok {
		return nil, ErrPasses
	}
	rep := &Report{Seed: base.Seed, Invariant: first.Invariant, FirstViolation: first.String(),
		FirstViolationStep: first.Step, Trials: opts.Trials, Records: []Record{}, Faults: []string{}}
	if n := len(r0.Trace); n > 0 {
		rep.Steps = r0.Trace[n-1].Step
	}
	inv := first.Invariant
	fails := func(r *sim.Result) bool {
		for _, v := range r.Violations {
			if v.Invariant == inv {
				return true
			}
		}
		return false
	}
	probe := func(step int64, stopAtPass bool) (Probe, error) {
		b := Batch{Step: step, Fails: fails, StopAtPass: stopAtPass}
		for trial := 0; trial < opts.Trials; trial++ {
			cfg := base
			cfg.NoTrace, cfg.TraceHashOnly = true, false
			cfg.Redraw = &sim.Redraw{After: step, Trial: uint64(trial), Reference: !opts.KeepBugs}
			b.Configs = append(b.Configs, cfg)
		}
		t, err := opts.Exec(b)
		if err != nil {
			return Probe{}, err
		}
		p := Probe{Step: step, Tally: t, Complete: t.Runs == opts.Trials}
		rep.Probes = append(rep.Probes, p)
		rep.Runs += t.Runs
		if opts.Progress != nil {
			opts.Progress(p)
		}
		return p, nil
	}
	finish := func() *Report {
		return rep
	}

	// Bisection between step 0 (some continuation passes, or the run was
	// bound to fail from the start) and the first violation (every
	// continuation fails, or nothing before it is decisive either).
	if rep.Start, err = probe(0, false); err != nil {
		return finish(), err
	}
	hiP, err := probe(first.Step, false)
	if err != nil {
		return finish(), err
	}
	var lo, hi int64 = 0, first.Step
	switch {
	case rep.Start.AllFail():
		hi, hiP = 0, rep.Start
	case !hiP.AllFail():
		// Not sealed at its first violation: report that step.
		rep.DecisiveStep, rep.After = first.Step, hiP
		rep.describe(r0, first.Step)
		return finish(), nil
	}
	rep.Sealed = true
	var loP *Probe
	if hi > 0 {
		s0 := rep.Start
		loP = &s0
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		p, err := probe(mid, true)
		if err != nil {
			return finish(), err
		}
		if p.AllFail() {
			hi, hiP = mid, p
		} else {
			lo, loP = mid, &p
		}
	}
	if loP != nil && !loP.Complete {
		// The step before the decisive one stopped at its first pass;
		// its estimate needs every trial.
		p, err := probe(lo, false)
		if err != nil {
			return finish(), err
		}
		loP = &p
	}
	rep.DecisiveStep, rep.After, rep.Before = hi, hiP, loP
	rep.describe(r0, hi)
	return finish(), nil
}

// describe lists the decisive step's trace records and faults, or those
// of the last step before it that has any.
func (rep *Report) describe(r *sim.Result, step int64) {
	at := int64(-1)
	for _, rec := range r.Trace {
		if rec.Step > step {
			break
		}
		at = rec.Step
	}
	rep.RecordsStep = at
	for _, rec := range r.Trace {
		if rec.Step != at {
			continue
		}
		if len(rep.Records) < maxRecords {
			rep.Records = append(rep.Records, Record{Actor: rec.Actor, Kind: rec.Kind, Text: rec.String(), Fault: rec.Kind == "fault"})
		}
		if rec.Kind == "fault" && at == step {
			rep.Faults = append(rep.Faults, rec.String())
		}
	}
}

// FirstViolation is the violation of the lowest step (the first listed
// among equals).
func FirstViolation(vs []oracle.Violation) (oracle.Violation, bool) {
	if len(vs) == 0 {
		return oracle.Violation{}, false
	}
	first := vs[0]
	for _, v := range vs[1:] {
		if v.Step < first.Step {
			first = v
		}
	}
	return first, true
}

// BugActs is the step at which base's known-bug variant first acted with
// an effect: the lowest k such that the run with the engines' bug switches
// on through step k only (sim.Config.BugsThrough) differs from the
// reference engine's run of the same seed. Bisected between step 0 and
// the first step the two runs' traces differ (by then it has acted). ok is
// false when base switches on no engine bug, or the variant's run does not
// differ from the reference's.
func BugActs(base sim.Config) (step int64, ok bool, err error) {
	ref := base
	ref.Bugs = engine.Bugs{NoReceiverDedup: base.Bugs.NoReceiverDedup}
	if ref.Bugs == base.Bugs {
		return 0, false, nil
	}
	ref.Redraw, ref.NoTrace, ref.TraceHashOnly = nil, false, false
	refRun, err := sim.Run(ref)
	if err != nil {
		return 0, false, err
	}
	full := base
	full.Redraw, full.NoTrace, full.TraceHashOnly = nil, false, false
	bugRun, err := sim.Run(full)
	if err != nil {
		return 0, false, err
	}
	hi, differ := FirstDivergence(refRun, bugRun)
	if fv, ok := FirstViolation(bugRun.Violations); ok && fv.Step < hi && verdicts(bugRun) != verdicts(refRun) {
		// The store can differ long before the trace does (a deleted
		// row); the checker, which reads it, may see it first.
		hi, differ = fv.Step, true
	}
	if !differ {
		return 0, false, nil
	}
	refVerdicts := verdicts(refRun)
	// The variant has acted by step k when its state after k differs
	// from the reference's: then the run with its switches on through k
	// differs from the reference's run, with the seed's draws or (an
	// action whose effect the seed's own continuation happens to hide)
	// with some re-drawn continuation.
	differs := func(k int64) (bool, error) {
		cfg := base
		cfg.Redraw, cfg.NoTrace, cfg.TraceHashOnly, cfg.BugsThrough = nil, false, true, k
		r, err := sim.Run(cfg)
		if err != nil || r.TraceHash != refRun.TraceHash || verdicts(r) != refVerdicts {
			return err == nil, err
		}
		for trial := uint64(0); trial < actsTrials; trial++ {
			a, b := cfg, ref
			a.BugsThrough = 0
			a.Redraw = &sim.Redraw{After: k, Trial: trial, Reference: true}
			b.Redraw, b.TraceHashOnly = &sim.Redraw{After: k, Trial: trial}, true
			ra, err := sim.Run(a)
			if err != nil {
				return false, err
			}
			rb, err := sim.Run(b)
			if err != nil {
				return false, err
			}
			if ra.TraceHash != rb.TraceHash || verdicts(ra) != verdicts(rb) {
				return true, nil
			}
		}
		return false, nil
	}
	// Through step 0 the switches act in no step (nodes boot at step 1
	// or later), so that run is the reference's.
	lo := int64(0)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		d, err := differs(mid)
		if err != nil {
			return 0, false, err
		}
		if d {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true, nil
}

// verdicts sums up a run's violations: what the checker (which reads the
// store as well as the trace) concluded, and where.
func verdicts(r *sim.Result) string {
	var b strings.Builder
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "%s@%d;", v.Invariant, v.Step)
	}
	return b.String()
}

// actsTrials is how many re-drawn continuations BugActs compares per step
// beside the seed's own.
const actsTrials = 4

// FirstDivergence is the first step at which two runs' traces differ (the
// run with a known-bug variant and the reference engine's run of the same
// seed: before it, the variant behaved as the reference), and false if
// they do not differ.
func FirstDivergence(a, b *sim.Result) (int64, bool) {
	n := min(len(a.Trace), len(b.Trace))
	for i := 0; i < n; i++ {
		if a.Trace[i].String() != b.Trace[i].String() {
			return min(a.Trace[i].Step, b.Trace[i].Step), true
		}
	}
	if len(a.Trace) != len(b.Trace) {
		if len(a.Trace) > n {
			return a.Trace[n].Step, true
		}
		return b.Trace[n].Step, true
	}
	return 0, false
}

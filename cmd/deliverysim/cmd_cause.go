package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/report"
	"github.com/deliverysim/deliverysim/sim"
	"github.com/deliverysim/deliverysim/sim/cause"
)

// causeReport is the JSON of `deliverysim cause`: sim/cause's report with
// what was asked.
type causeReport struct {
	SchemaVersion int      `json:"schema_version"`
	Scenario      string   `json:"scenario,omitempty"`
	Bugs          []string `json:"bugs"`
	// ContinueWith: which engine the continuations run after the branch
	// ("reference", or "variant" under --keep-bugs).
	ContinueWith string `json:"continue_with"`
	// BugActsStep: with an engine known-bug variant, the step it first
	// acted at (cause.BugActs); absent otherwise.
	BugActsStep *int64 `json:"bug_acts_step,omitempty"`
	*cause.Report
	Parallel    int    `json:"parallel"`
	Interrupted bool   `json:"interrupted"`
	Reproduce   string `json:"reproduce"`
}

// cmdCause finds the decisive step of a failing seed or scenario
// (sim/cause). The continuations are simulated on --parallel workers
// (causeExec); the search itself is sim/cause's and deterministic.
func (a *app) cmdCause(args []string) (int, error) {
	fs := newFlagSet("cause", a.stderr)
	c := common{backend: "memory"}
	fs.StringVar(&c.bugsFlag, "bugs", "", "known-bug engine variants, comma-separated: "+strings.Join(bugNames(), ", "))
	fs.StringVar(&c.faultsArg, "faults", "", "fault plan kind=rate[/max],... (default: drawn from the seed); \"none\" disables faults")
	fs.BoolVar(&c.verbose, "verbose", false, "debug diagnostics on stderr")
	seedS := fs.String("seed", "", "the failing seed")
	scenarioS := fs.String("scenario", "", "a failing scenario file or library name (instead of --seed)")
	jsonOut := fs.Bool("json", false, "print a JSON report on stdout")
	trials := fs.Int("trials", cause.DefaultTrials, "re-drawn continuations per probed step (2 to 1000)")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "continuations simulated at once (1 to 1024)")
	keepBugs := fs.Bool("keep-bugs", false, "continue a known-bug variant's run with its bugs on (default: as the reference engine after the branch, so the decisive step is the bug's action)")
	htmlS := fs.String("html", "", "also write the run's HTML report, the decisive step marked on its timeline")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *trials < 2 || *trials > 1000 {
		return 2, usagef("--trials %d is outside [2, 1000]", *trials)
	}
	if *parallel < 1 || *parallel > 1024 {
		return 2, usagef("--parallel %d is outside [1, 1024]", *parallel)
	}
	if *htmlS != "" {
		if err := checkWritableFile("--html", *htmlS); err != nil {
			return 2, usagef("%v", err)
		}
	}
	t, err := a.target(&c, *seedS, *scenarioS)
	if err != nil {
		return 2, err
	}
	base := sim.Config{Seed: t.seed, Bugs: c.bugs, Plan: c.plan}
	if t.sc != nil {
		if base, err = t.sc.Build(c.bugNames...); err != nil {
			return 2, usagef("--scenario %s: %v", t.ref, err)
		}
	}
	base.Context = a.ctx

	out := causeReport{SchemaVersion: schemaVersion, Scenario: t.ref, Bugs: c.bugNames, ContinueWith: "reference",
		Parallel: *parallel, Reproduce: t.reproduce()}
	if out.Bugs == nil {
		out.Bugs = []string{}
	}
	if *keepBugs {
		out.ContinueWith = "variant"
	}
	start := time.Now()
	rep, err := cause.Find(base, cause.Options{Trials: *trials, KeepBugs: *keepBugs,
		Exec: a.causeExec(*parallel),
		Progress: func(p cause.Probe) {
			a.log.Info("cause progress", "step", p.Step, "failed", p.Failed, "runs", p.Runs, "elapsed", time.Since(start).Round(time.Millisecond))
		}})
	if rep != nil {
		// Wall-clock time is the caller's: sim/ reads no clock.
		rep.Seconds = time.Since(start).Seconds()
	}
	out.Report = rep
	if err == nil && !*keepBugs {
		var step int64
		var ok bool
		if step, ok, err = cause.BugActs(base); ok {
			out.BugActsStep = &step
		}
	}
	if err != nil {
		if a.interrupted() {
			out.Interrupted = true
			a.printCause(out, *jsonOut)
			return exitInterrupted, nil
		}
		if errors.Is(err, cause.ErrPasses) {
			return 2, usagef("cause: %s: %v", t.describe(), err)
		}
		return 2, fmt.Errorf("cause: %w", err)
	}
	if *htmlS != "" {
		if err := a.writeCauseHTML(*htmlS, base, t, rep); err != nil {
			return 2, err
		}
	}
	a.printCause(out, *jsonOut)
	return 0, nil
}

// describe names the target in messages.
func (t *runTarget) describe() string {
	if t.sc != nil {
		return "scenario " + t.ref
	}
	return "seed " + strconv.FormatUint(t.seed, 10)
}

// causeExec is a cause.Exec on k workers. The tally it returns does not
// depend on k or on timing: for a probe that may stop at a pass, trials
// are dispatched in order and it counts the trials up to the first pass
// in trial order (all of them finish before it returns), which is what a
// sequential run would have counted.
func (a *app) causeExec(k int) cause.Exec {
	return func(b cause.Batch) (cause.Tally, error) {
		n := len(b.Configs)
		failed := make([]bool, n)
		ran := make([]bool, n)
		var (
			mu       sync.Mutex
			firstErr error
			passAt   = n // lowest trial seen passing
		)
		next := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < min(k, n); w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					r, err := sim.Run(b.Configs[i])
					mu.Lock()
					switch {
					case err != nil:
						if firstErr == nil {
							firstErr = err
						}
					default:
						ran[i], failed[i] = true, b.Fails(r)
						if !failed[i] && i < passAt {
							passAt = i
						}
					}
					mu.Unlock()
				}
			}()
		}
	dispatch:
		for i := 0; i < n; i++ {
			mu.Lock()
			stop := firstErr != nil || (b.StopAtPass && passAt < n)
			mu.Unlock()
			if stop {
				break
			}
			select {
			case next <- i:
			case <-a.ctx.Done():
				break dispatch
			}
		}
		close(next)
		wg.Wait()
		if firstErr != nil {
			return cause.Tally{}, firstErr
		}
		if err := a.ctx.Err(); err != nil {
			return cause.Tally{}, err
		}
		last := n
		if b.StopAtPass && passAt < n {
			last = passAt + 1
		}
		var t cause.Tally
		for i := 0; i < last; i++ {
			if !ran[i] {
				return cause.Tally{}, fmt.Errorf("trial %d of step %d did not run", i, b.Step)
			}
			t.Runs++
			if failed[i] {
				t.Failed++
			}
		}
		return t, nil
	}
}

func (a *app) printCause(out causeReport, jsonOut bool) {
	if jsonOut {
		_ = writeJSON(a.stdout, out)
		return
	}
	printCause(a.stdout, out)
}

func pct(p cause.Probe) string {
	return fmt.Sprintf("%d of %d continuations fail (p = %.2f)", p.Failed, p.Runs, p.P())
}

func printCause(w io.Writer, out causeReport) {
	rep := out.Report
	if rep == nil {
		// Interrupted during the run itself, before any probe.
		fmt.Fprintln(w, "cause: INTERRUPTED before the first probe: no verdict")
		return
	}
	what := fmt.Sprintf("seed %d", rep.Seed)
	if out.Scenario != "" {
		what = "scenario " + out.Scenario
	}
	if len(out.Bugs) > 0 {
		what += " with bugs " + strings.Join(out.Bugs, ",")
	}
	fmt.Fprintf(w, "cause of %s: %s, first violated at step %d of %d\n  %s\n", what, rep.Invariant, rep.FirstViolationStep, rep.Steps, rep.FirstViolation)
	if out.Interrupted {
		fmt.Fprintf(w, "INTERRUPTED after %d probes (%d continuations): no verdict\n", len(rep.Probes), rep.Runs)
		return
	}
	switch {
	case !rep.Sealed:
		fmt.Fprintf(w, "\nnot sealed by its first violation: after step %d, %s; the violation is judged on later events\n", rep.DecisiveStep, pct(rep.After))
	case rep.Before == nil:
		fmt.Fprintf(w, "\ndecisive step 0: the run was bound to fail from the start (%s): the workload and the engine alone\n", pct(rep.After))
	default:
		fmt.Fprintf(w, "\ndecisive step %d: after it %s;\n  after step %d, %s; from the start, %s\n", rep.DecisiveStep, pct(rep.After), rep.Before.Step, pct(*rep.Before), pct(rep.Start))
	}
	fmt.Fprintf(w, "\nat step %d:\n", rep.DecisiveStep)
	for _, r := range rep.Records {
		fmt.Fprintf(w, "  %s\n", r.Text)
	}
	if len(rep.Faults) == 0 {
		fmt.Fprintln(w, "  (no fault injected at this step: the decision is the engine's or the world's draw above)")
	}
	if out.BugActsStep != nil {
		fmt.Fprintf(w, "\nthe variant first acted at step %d\n", *out.BugActsStep)
	}
	fmt.Fprintf(w, "\n%d continuations (%d per probe, %d probes, continuing with the %s engine) in %.1f s\n", rep.Runs, rep.Trials, len(rep.Probes), out.ContinueWith, rep.Seconds)
	fmt.Fprintf(w, "reproduce: %s\n", out.Reproduce)
}

// writeCauseHTML writes the run's HTML report with the decisive step
// marked on its timeline.
func (a *app) writeCauseHTML(path string, base sim.Config, t *runTarget, rep *cause.Report) error {
	full := base
	r, err := sim.Run(full)
	if err != nil {
		return err
	}
	return writeHTMLFile(path, r, report.Info{Bugs: t.c.bugNames, Backend: "memory", Reproduce: t.reproduce(),
		Mark: &report.Mark{Step: rep.DecisiveStep, Label: fmt.Sprintf("decisive step %d", rep.DecisiveStep)}})
}

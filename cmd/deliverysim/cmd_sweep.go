package main

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model"
	"github.com/deliverysim/deliverysim/sim"
)

// sweepReport is the JSON of `deliverysim sweep`. It is built in seed
// order from per-seed results, so it does not depend on which worker
// finished first.
type sweepReport struct {
	Seeds           string           `json:"seeds"`
	Backend         string           `json:"backend"`
	Bugs            []string         `json:"bugs"`
	SeedsRun        int              `json:"seeds_run"`
	ViolationsTotal int              `json:"violations_total"`
	FailingSeeds    []failingSeed    `json:"failing_seeds"`
	Invariants      map[string]int   `json:"invariants"` // invariant -> failing seeds
	Faults          map[string]int   `json:"faults"`     // injected over the sweep
	Counters        sim.Counters     `json:"counters"`   // summed over the sweep
	Errors          []seedError      `json:"errors"`
	Determinism     *determinismInfo `json:"determinism,omitempty"`
}

type failingSeed struct {
	Seed       uint64   `json:"seed"`
	Invariants []string `json:"invariants"`
	Violations int      `json:"violations"`
	First      string   `json:"first"`
	Reproduce  string   `json:"reproduce"`
}

type seedError struct {
	Seed  uint64 `json:"seed"`
	Error string `json:"error"`
}

type determinismInfo struct {
	Checked          int      `json:"checked"`
	Nondeterministic []uint64 `json:"nondeterministic"`
}

type seedOutcome struct {
	r      *sim.Result
	second string // trace hash of the determinism re-run
	err    error
}

func (a *app) cmdSweep(args []string) (int, error) {
	fs := newFlagSet("sweep", a.stderr)
	var c common
	c.register(fs, true)
	seedsS := fs.String("seeds", "", "inclusive seed range A-B")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds simulated at once")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	lo, hi, err := parseSeedRange(*seedsS)
	if err != nil {
		return 2, err
	}
	if *parallel < 1 {
		return 2, usagef("--parallel %d: use at least 1", *parallel)
	}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}

	n := int(hi - lo + 1)
	outs := make([]seedOutcome, n)
	start := time.Now()
	a.sweepSeeds(&c, lo, n, *parallel, outs)
	a.log.Info("sweep finished", "seeds", n, "elapsed", time.Since(start).Round(time.Millisecond))

	rep := buildSweepReport(&c, *seedsS, lo, outs)
	if len(rep.Errors) > 0 && len(rep.Errors) == n {
		// Nothing ran at all: say why once rather than n times.
		return 2, &envError{err: fmt.Errorf("no seed could run: %s", rep.Errors[0].Error)}
	}
	if c.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printSweep(a.stdout, rep)
	}
	switch {
	case len(rep.Errors) > 0:
		return 2, nil
	case len(rep.FailingSeeds) > 0:
		return 1, nil
	}
	return 0, nil
}

// sweepSeeds runs seeds lo..lo+n-1 on k workers. Each seed is independent
// and fully deterministic, so parallelism changes only the wall time.
func (a *app) sweepSeeds(c *common, lo uint64, n, k int, outs []seedOutcome) {
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, failing := 0, 0
	every := max(1, n/20)
	lastLog := time.Now()
	for w := 0; w < min(k, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				seed := lo + uint64(i)
				var o seedOutcome
				o.r, o.err = a.simulate(c, seed)
				if o.err == nil {
					// The summary needs the hash, not the trace; keeping
					// hundreds of traces would cost gigabytes.
					o.r.Trace = nil
				}
				if o.err == nil && c.determin {
					var again *sim.Result
					if again, o.err = a.simulate(c, seed); o.err == nil {
						o.second = again.TraceHash
					}
				}
				outs[i] = o
				mu.Lock()
				done++
				if o.err != nil || len(o.r.Violations) > 0 || (c.determin && o.second != o.r.TraceHash) {
					failing++
				}
				if done%every == 0 || done == n || time.Since(lastLog) > 5*time.Second {
					lastLog = time.Now()
					a.log.Info("sweep progress", "done", done, "total", n, "failing", failing)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

func buildSweepReport(c *common, seeds string, lo uint64, outs []seedOutcome) sweepReport {
	rep := sweepReport{
		Seeds: seeds, Backend: c.backend, Bugs: c.bugNames,
		FailingSeeds: []failingSeed{}, Invariants: map[string]int{}, Faults: map[string]int{},
		Errors: []seedError{},
	}
	if rep.Bugs == nil {
		rep.Bugs = []string{}
	}
	for _, inv := range model.Invariants() {
		rep.Invariants[inv] = 0
	}
	for _, k := range faults.All() {
		rep.Faults[string(k)] = 0
	}
	if c.determin {
		rep.Determinism = &determinismInfo{Nondeterministic: []uint64{}}
		rep.Invariants[invDeterminism] = 0
	}
	for i, o := range outs {
		seed := lo + uint64(i)
		if o.err != nil {
			rep.Errors = append(rep.Errors, seedError{Seed: seed, Error: o.err.Error()})
			continue
		}
		r := o.r
		rep.SeedsRun++
		for k, v := range r.Faults {
			rep.Faults[string(k)] += v
		}
		rep.Counters.Add(r.Counters)
		vs := r.Violations
		if c.determin {
			rep.Determinism.Checked++
			if o.second != r.TraceHash {
				rep.Determinism.Nondeterministic = append(rep.Determinism.Nondeterministic, seed)
				vs = append(vs, model.Violation{Invariant: invDeterminism, Time: sim.Epoch,
					Detail: fmt.Sprintf("two runs gave different traces: %s then %s", r.TraceHash, o.second)})
			}
		}
		if len(vs) == 0 {
			continue
		}
		rep.ViolationsTotal += len(vs)
		var invs []string
		seen := map[string]bool{}
		for _, v := range vs {
			if !seen[v.Invariant] {
				seen[v.Invariant] = true
				invs = append(invs, v.Invariant)
				rep.Invariants[v.Invariant]++
			}
		}
		sort.Strings(invs)
		rep.FailingSeeds = append(rep.FailingSeeds, failingSeed{
			Seed: seed, Invariants: invs, Violations: len(vs), First: vs[0].String(), Reproduce: c.reproduce(seed),
		})
	}
	return rep
}

func printSweep(w io.Writer, rep sweepReport) {
	fmt.Fprintf(w, "sweep of seeds %s on %s", rep.Seeds, rep.Backend)
	if len(rep.Bugs) > 0 {
		fmt.Fprintf(w, " with bugs %s", strings.Join(rep.Bugs, ","))
	}
	fmt.Fprintf(w, ": %d seeds run, %d failing, %d violations\n", rep.SeedsRun, len(rep.FailingSeeds), rep.ViolationsTotal)
	c := rep.Counters
	fmt.Fprintf(w, "  events %d, obligations %d, sends %d, deliveries %d, duplicates %d, retries %d,\n",
		c.Events, c.Obligations, c.Sends, c.Deliveries, c.Duplicates, c.Retries)
	fmt.Fprintf(w, "  dead letters %d, retention drops %d, rejected %d, crashes %d\n",
		c.DeadLetters, c.RetentionDrops, c.Rejected, c.Crashes)
	fmt.Fprintf(w, "\n%-28s %s\n", "INVARIANT", "FAILING SEEDS")
	invs := model.Invariants()
	if rep.Determinism != nil {
		invs = append(invs, invDeterminism)
	}
	for _, inv := range invs {
		fmt.Fprintf(w, "%-28s %d\n", inv, rep.Invariants[inv])
	}
	fmt.Fprintf(w, "\n%-38s %s\n", "FAULT KIND", "INJECTED")
	for _, k := range faults.All() {
		fmt.Fprintf(w, "%-38s %d\n", k, rep.Faults[string(k)])
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "\nseed %d could not run: %s", e.Seed, e.Error)
	}
	if len(rep.FailingSeeds) == 0 {
		fmt.Fprintln(w, "\nverdict: PASS")
		return
	}
	fmt.Fprintf(w, "\nfailing seeds (%d):\n", len(rep.FailingSeeds))
	for _, f := range rep.FailingSeeds {
		fmt.Fprintf(w, "  seed %d: %s (%d violations)\n    first: %s\n    reproduce: %s\n",
			f.Seed, strings.Join(f.Invariants, ", "), f.Violations, f.First, f.Reproduce)
	}
	fmt.Fprintln(w, "verdict: FAIL")
}

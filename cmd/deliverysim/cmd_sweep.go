package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/internal/outdir"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// schemaVersion is the "schema_version" of every JSON document the command
// prints (cmd/deliverysim/json.md describes them). It changes when a field changes
// meaning or goes away; new fields do not change it.
const schemaVersion = 1

// maxListed bounds the failing seeds and the seed errors a sweep lists in
// detail (the lowest seeds; the totals count every one), so a sweep's
// memory does not grow with its length even when every seed fails.
const maxListed = 1000

// sweepReport is the JSON of `deliverysim sweep` and of `deliverysim
// merge`. Seeds are added in seed order, so it does not depend on which
// worker finished first.
type sweepReport struct {
	SchemaVersion     int              `json:"schema_version"`
	Seeds             string           `json:"seeds"`
	Shard             *shardInfo       `json:"shard,omitempty"`
	Backend           string           `json:"backend"`
	Bugs              []string         `json:"bugs"`
	Plan              string           `json:"plan"` // --faults, or "drawn per seed"
	SeedsPlanned      uint64           `json:"seeds_planned"`
	SeedsRun          uint64           `json:"seeds_run"`
	Interrupted       bool             `json:"interrupted"`
	ViolationsTotal   int              `json:"violations_total"`
	FailingSeedsTotal uint64           `json:"failing_seeds_total"`
	FailingSeeds      []failingSeed    `json:"failing_seeds"` // the lowest maxListed
	Invariants        map[string]int   `json:"invariants"`    // invariant -> failing seeds
	Faults            map[string]int   `json:"faults"`        // injected over the sweep
	Counters          sim.Counters     `json:"counters"`      // summed over the sweep
	ErrorsTotal       uint64           `json:"errors_total"`
	Errors            []seedError      `json:"errors"` // the lowest maxListed
	Determinism       *determinismInfo `json:"determinism,omitempty"`
	// Coverage is the catalogue (sim.Catalogue) with, per situation, how
	// often it happened over the sweep and in how many seeds.
	Coverage []coverageRow `json:"coverage"`
	// Uncovered names the situations no seed reached.
	Uncovered []string `json:"uncovered"`
	// Resources (--resources only: they differ from run to run, and a
	// report is otherwise the same for the same seeds) is what this
	// process took.
	Resources *sweepResources `json:"resources,omitempty"`
}

// sweepResources is what a sweep process took: wall time and its peak
// resident memory, so that "memory stays flat over many seeds" and seeds/s
// can be read off the report.
type sweepResources struct {
	Seconds        float64 `json:"seconds"`
	SeedsPerSecond float64 `json:"seeds_per_second"`
	Parallel       int     `json:"parallel"`
	// MaxRSSBytes is getrusage's ru_maxrss of this process: its peak
	// resident set over its whole life (0 where the OS does not say).
	MaxRSSBytes int64 `json:"max_rss_bytes"`
}

type coverageRow struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Seeds int    `json:"seeds"`
	Doc   string `json:"doc"`
}

// shardInfo says which part of Seeds a shard's report covers.
type shardInfo struct {
	Index int    `json:"index"` // 1-based
	Count int    `json:"count"`
	Seeds string `json:"seeds"` // the shard's own range, "" if empty
}

type failingSeed struct {
	Seed       uint64   `json:"seed"`
	Invariants []string `json:"invariants"`
	Violations int      `json:"violations"`
	First      string   `json:"first"`
	Reproduce  string   `json:"reproduce"`
	Artifacts  string   `json:"artifacts,omitempty"` // the seed's directory under --artifacts
}

type seedError struct {
	Seed  uint64 `json:"seed"`
	Error string `json:"error"`
}

type determinismInfo struct {
	Checked          int      `json:"checked"`
	Nondeterministic []uint64 `json:"nondeterministic"`
}

// seedOutcome is what a sweep keeps of one seed: a few numbers and, if it
// failed, one line. The simulation result itself is dropped in the worker.
type seedOutcome struct {
	seed      uint64
	err       error
	abandoned bool // interrupted before it could finish
	faults    map[faults.Kind]int
	counters  sim.Counters
	vs        []oracle.Violation // first violation and count only are used
	nvs       int
	invs      []string
	hash      string
	second    string // trace hash of the determinism re-run
	coverage  map[string]int
}

func (a *app) cmdSweep(args []string) (int, error) {
	fs := newFlagSet("sweep", a.stderr)
	var c common
	c.register(fs, true)
	seedsS := fs.String("seeds", "", "inclusive seed range A-B (at most 100000000 seeds)")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0), "seeds simulated at once (1 to 1024)")
	shardS := fs.String("shard", "", "run only shard I of N of the range (I/N, 1 <= I <= N <= 10000); N alone takes I from $JOB_COMPLETION_INDEX (0-based)")
	junit := fs.String("junit", "", "also write a JUnit XML report (one test case per seed) to this file")
	requireCov := fs.Bool("require-coverage", false, "exit 1 naming every situation of the coverage catalogue that no seed reached")
	artifacts := fs.String("artifacts", "", "for the lowest failing seeds (at most 10): write trace, scenario and minimized scenario under this directory")
	resources := fs.Bool("resources", false, "add resources to the JSON: seconds, seeds/s and the process's peak RSS (max_rss_bytes)")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	lo, hi, err := parseSeedRange(*seedsS)
	if err != nil {
		return 2, err
	}
	if *parallel < 1 || *parallel > 1024 {
		return 2, usagef("--parallel %d is outside [1, 1024]", *parallel)
	}
	shard, err := parseShard(*shardS, a.getenv)
	if err != nil {
		return 2, err
	}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	// An artifacts folder that cannot be written is found now, not after
	// the sweep as one warning per failing seed and nothing for CI to
	// upload.
	if *artifacts != "" {
		if err := outdir.Check("--artifacts", *artifacts); err != nil {
			return 2, usagef("%v", err)
		}
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}

	// The collector's target for a sweep (sim.SweepGCPercent says why). An
	// explicit GOGC in the environment wins.
	if a.getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(sim.SweepGCPercent))
	}
	agg := newSweepAgg(&c, *seedsS, hi-lo+1)
	if shard != nil {
		slo, shi, empty := shardRange(lo, hi, shard.Index, shard.Count)
		if !empty {
			shard.Seeds = fmt.Sprintf("%d-%d", slo, shi)
			lo, hi = slo, shi
		}
		agg.rep.Shard = shard
		if empty {
			agg.rep.SeedsPlanned = 0
			lo, hi = 1, 0
		} else {
			agg.rep.SeedsPlanned = hi - lo + 1
		}
	}
	var jw *junitSweep
	if *junit != "" {
		if jw, err = newJUnitSweep(*junit); err != nil {
			return 2, usagef("--junit: %v", err)
		}
		defer jw.abort()
	}
	start := time.Now()
	var n uint64
	if hi >= lo {
		n = hi - lo + 1
	}
	interrupted := a.sweepSeeds(&c, lo, n, *parallel, func(o *seedOutcome) {
		agg.add(o)
		if jw != nil {
			jw.add(&c, o)
		}
	})
	agg.rep.Interrupted = interrupted
	if *resources {
		secs := time.Since(start).Seconds()
		agg.rep.Resources = &sweepResources{Seconds: secs, Parallel: *parallel, MaxRSSBytes: maxRSSBytes()}
		if secs > 0 {
			agg.rep.Resources.SeedsPerSecond = float64(agg.rep.SeedsRun) / secs
		}
	}
	a.log.Info("sweep finished", "seeds", agg.rep.SeedsRun, "elapsed", time.Since(start).Round(time.Millisecond), "interrupted", interrupted)
	rep := agg.report()
	var gone error
	if c.backend == "postgres" && !interrupted {
		if lost := a.health.lostErr(); lost != nil {
			gone = &envError{err: fmt.Errorf("%d of %d seeds not run: %w", n-rep.SeedsRun, n, lost)}
		}
	}
	if !interrupted && rep.ErrorsTotal > 0 && rep.ErrorsTotal == n {
		// Nothing ran at all: say why once rather than n times.
		return 2, &envError{err: fmt.Errorf("no seed could run: seed %d: %s", rep.Errors[0].Seed, rep.Errors[0].Error)}
	}
	if *artifacts != "" && !interrupted && gone == nil {
		a.sweepArtifacts(&c, *artifacts, &rep)
		// A signal during the artifacts leaves the seeds' verdicts whole
		// but the artifacts partial: still an interrupted command.
		interrupted = a.interrupted()
		rep.Interrupted = interrupted
	}
	if jw != nil {
		if err := jw.finish(rep); err != nil {
			return 2, fmt.Errorf("--junit: %v", err)
		}
	}
	if c.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printSweep(a.stdout, rep)
	}
	a.annotateSweep(rep)
	if interrupted {
		return exitInterrupted, nil
	}
	if gone != nil {
		return 2, gone
	}
	if code := sweepExit(rep); code != 0 {
		return code, nil
	}
	if *requireCov && len(rep.Uncovered) > 0 {
		fmt.Fprintf(a.stderr, "deliverysim: --require-coverage: no seed reached %d situation(s): %s\n",
			len(rep.Uncovered), strings.Join(rep.Uncovered, ", "))
		return 1, nil
	}
	return 0, nil
}

// exitInterrupted is the exit status after SIGINT or SIGTERM (128+SIGINT,
// as shells report an interrupted command).
const exitInterrupted = 130

// sweepExit is the status a sweep (or a merge of shards) exits with.
func sweepExit(rep sweepReport) int {
	switch {
	case rep.Interrupted:
		return exitInterrupted
	case rep.ErrorsTotal > 0:
		return 2
	case rep.FailingSeedsTotal > 0:
		return 1
	}
	return 0
}

// sweepWindow bounds how far the workers may run ahead of the lowest seed
// not yet reported: results are reported in seed order through a buffer of
// at most this many entries, so memory stays flat whatever the range.
func sweepWindow(k int) int { return 4*k + 64 }

// sweepSeeds runs seeds lo..lo+n-1 on k workers and hands each outcome to
// emit in seed order (from one goroutine). Each seed is independent and
// fully deterministic, so parallelism changes only the wall time. When the
// invocation's context is cancelled (SIGINT, SIGTERM) no new seed starts;
// seeds in flight finish, or are marked abandoned if their backend gave up.
// It reports whether the sweep was interrupted.
func (a *app) sweepSeeds(c *common, lo, n uint64, k int, emit func(*seedOutcome)) bool {
	if n == 0 {
		return a.ctx.Err() != nil
	}
	window := sweepWindow(k)
	tokens := make(chan struct{}, window)
	next := make(chan uint64)
	results := make(chan *seedOutcome, window)
	var wg sync.WaitGroup
	for w := uint64(0); w < min(uint64(k), n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results <- a.sweepOne(c, lo+i)
			}
		}()
	}
	var dispatched uint64
	// A Postgres sweep stops starting seeds once the database is gone:
	// each would only fail at once with the same error.
	var lost <-chan struct{}
	if c.backend == "postgres" {
		lost = a.health.context(a.ctx).Done()
	}
	go func() {
		defer close(next)
		for i := uint64(0); i < n; i++ {
			select {
			case tokens <- struct{}{}:
			case <-a.ctx.Done():
				return
			case <-lost:
				return
			}
			select {
			case next <- i:
				dispatched = i + 1
			case <-a.ctx.Done():
				return
			case <-lost:
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()

	pending := map[uint64]*seedOutcome{}
	want := lo
	var done, failing uint64
	every := max(1, n/20)
	lastLog := time.Now()
	for o := range results {
		pending[o.seed] = o
		for {
			p, ok := pending[want]
			if !ok {
				break
			}
			delete(pending, want)
			want++
			<-tokens
			if p.abandoned {
				continue
			}
			emit(p)
			done++
			if p.err != nil || p.nvs > 0 {
				failing++
			}
			if done%every == 0 || done == n || time.Since(lastLog) > 5*time.Second {
				lastLog = time.Now()
				a.log.Info("sweep progress", "done", done, "total", n, "failing", failing)
			}
		}
	}
	return a.ctx.Err() != nil && (dispatched < n || done < n)
}

// sweepOne simulates one seed and keeps only what the report needs.
func (a *app) sweepOne(c *common, seed uint64) *seedOutcome {
	o := &seedOutcome{seed: seed}
	// The trace's hash is read only to compare the two runs of a
	// determinism check.
	kept := traceNone
	if c.determin {
		kept = traceHash
	}
	r, err := a.simulate(c, seed, kept)
	if err != nil {
		o.err = err
		o.abandoned = a.ctx.Err() != nil
		return o
	}
	if c.determin {
		again, err := a.simulate(c, seed, traceHash)
		if err != nil {
			o.err = err
			o.abandoned = a.ctx.Err() != nil
			return o
		}
		o.second = again.TraceHash
	}
	o.faults, o.counters, o.hash, o.coverage = r.Faults, r.Counters, r.TraceHash, r.Coverage
	vs := r.Violations
	if c.determin && o.second != r.TraceHash {
		vs = append(vs, oracle.Violation{Invariant: invDeterminism, Time: sim.Epoch,
			Detail: fmt.Sprintf("two runs gave different traces: %s then %s", r.TraceHash, o.second)})
	}
	o.nvs = len(vs)
	if len(vs) > 0 {
		o.vs = vs[:1]
		seen := map[string]bool{}
		for _, v := range vs {
			if !seen[v.Invariant] {
				seen[v.Invariant] = true
				o.invs = append(o.invs, v.Invariant)
			}
		}
		sort.Strings(o.invs)
	}
	return o
}

// sweepAgg folds seed outcomes (or shard reports) into one report.
type sweepAgg struct {
	c   *common
	rep sweepReport
}

func newSweepAgg(c *common, seeds string, planned uint64) *sweepAgg {
	rep := sweepReport{
		SchemaVersion: schemaVersion, Seeds: seeds, Backend: c.backend, Bugs: c.bugNames,
		Plan: "drawn per seed", SeedsPlanned: planned,
		FailingSeeds: []failingSeed{}, Invariants: map[string]int{}, Faults: map[string]int{},
		Errors: []seedError{},
	}
	if c.plan != nil {
		rep.Plan = c.plan.String()
	}
	if rep.Bugs == nil {
		rep.Bugs = []string{}
	}
	for _, inv := range oracle.Invariants() {
		rep.Invariants[inv] = 0
	}
	for _, k := range faults.All() {
		rep.Faults[string(k)] = 0
	}
	if c.determin {
		rep.Determinism = &determinismInfo{Nondeterministic: []uint64{}}
		rep.Invariants[invDeterminism] = 0
	}
	for _, p := range sim.Catalogue() {
		rep.Coverage = append(rep.Coverage, coverageRow{Name: p.Name, Doc: p.Doc})
	}
	return &sweepAgg{c: c, rep: rep}
}

func (g *sweepAgg) add(o *seedOutcome) {
	rep := &g.rep
	if o.err != nil {
		rep.ErrorsTotal++
		if len(rep.Errors) < maxListed {
			rep.Errors = append(rep.Errors, seedError{Seed: o.seed, Error: o.err.Error()})
		}
		return
	}
	rep.SeedsRun++
	for k, v := range o.faults {
		rep.Faults[string(k)] += v
	}
	rep.Counters.Add(o.counters)
	for i, row := range rep.Coverage {
		if n := o.coverage[row.Name]; n > 0 {
			rep.Coverage[i].Count += n
			rep.Coverage[i].Seeds++
		}
	}
	if g.c.determin {
		rep.Determinism.Checked++
		if o.second != o.hash && len(rep.Determinism.Nondeterministic) < maxListed {
			rep.Determinism.Nondeterministic = append(rep.Determinism.Nondeterministic, o.seed)
		}
	}
	if o.nvs == 0 {
		return
	}
	rep.ViolationsTotal += o.nvs
	rep.FailingSeedsTotal++
	for _, inv := range o.invs {
		rep.Invariants[inv]++
	}
	if len(rep.FailingSeeds) < maxListed {
		rep.FailingSeeds = append(rep.FailingSeeds, failingSeed{
			Seed: o.seed, Invariants: o.invs, Violations: o.nvs, First: o.vs[0].String(), Reproduce: g.c.reproduce(o.seed),
		})
	}
}

// report is the summary so far; Uncovered is computed from the coverage
// counts (empty when no seed ran, so nothing is claimed unreached).
func (g *sweepAgg) report() sweepReport {
	rep := g.rep
	rep.Uncovered = uncovered(rep)
	return rep
}

func uncovered(rep sweepReport) []string {
	out := []string{}
	if rep.SeedsRun == 0 {
		return out
	}
	for _, row := range rep.Coverage {
		if row.Count == 0 {
			out = append(out, row.Name)
		}
	}
	return out
}

func printSweep(w io.Writer, rep sweepReport) {
	fmt.Fprintf(w, "sweep of seeds %s on %s", rep.Seeds, rep.Backend)
	if rep.Shard != nil {
		fmt.Fprintf(w, " (shard %d/%d: %s)", rep.Shard.Index, rep.Shard.Count, orNone(rep.Shard.Seeds))
	}
	if len(rep.Bugs) > 0 {
		fmt.Fprintf(w, " with bugs %s", strings.Join(rep.Bugs, ","))
	}
	fmt.Fprintf(w, ": %d seeds run, %d failing, %d violations\n", rep.SeedsRun, rep.FailingSeedsTotal, rep.ViolationsTotal)
	if rep.Interrupted {
		fmt.Fprintf(w, "  INTERRUPTED: %d of %d seeds ran; the summary covers those only\n", rep.SeedsRun, rep.SeedsPlanned)
	}
	c := rep.Counters
	fmt.Fprintf(w, "  events %d, obligations %d, sends %d, deliveries %d, duplicates %d, retries %d,\n",
		c.Events, c.Obligations, c.Sends, c.Deliveries, c.Duplicates, c.Retries)
	fmt.Fprintf(w, "  dead letters %d, retention drops %d, rejected %d, crashes %d\n",
		c.DeadLetters, c.RetentionDrops, c.Rejected, c.Crashes)
	fmt.Fprintf(w, "\n%-28s %s\n", "INVARIANT", "FAILING SEEDS")
	invs := oracle.Invariants()
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
	if len(rep.Coverage) > 0 {
		fmt.Fprintf(w, "\n%-56s %9s %6s\n", "SITUATION (coverage catalogue)", "COUNT", "SEEDS")
		for _, row := range rep.Coverage {
			mark := ""
			if row.Count == 0 {
				mark = "  <- not reached"
			}
			fmt.Fprintf(w, "%-56s %9d %6d%s\n", row.Name, row.Count, row.Seeds, mark)
		}
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "\nseed %d could not run: %s", e.Seed, e.Error)
	}
	if rep.ErrorsTotal > uint64(len(rep.Errors)) {
		fmt.Fprintf(w, "\n... and %d more seeds could not run", rep.ErrorsTotal-uint64(len(rep.Errors)))
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintln(w)
	}
	if rep.FailingSeedsTotal == 0 {
		if rep.Interrupted {
			fmt.Fprintln(w, "\nverdict: INTERRUPTED (no failure among the seeds that ran)")
		} else if rep.ErrorsTotal > 0 {
			fmt.Fprintln(w, "\nverdict: ERROR (some seeds could not run)")
		} else {
			fmt.Fprintln(w, "\nverdict: PASS")
		}
		return
	}
	fmt.Fprintf(w, "\nfailing seeds (%d):\n", rep.FailingSeedsTotal)
	for _, f := range rep.FailingSeeds {
		fmt.Fprintf(w, "  seed %d: %s (%d violations)\n    first: %s\n    reproduce: %s\n",
			f.Seed, strings.Join(f.Invariants, ", "), f.Violations, f.First, f.Reproduce)
		if f.Artifacts != "" {
			fmt.Fprintf(w, "    artifacts: %s\n", f.Artifacts)
		}
	}
	if rep.FailingSeedsTotal > uint64(len(rep.FailingSeeds)) {
		fmt.Fprintf(w, "  ... and %d more (the lowest %d are listed)\n", rep.FailingSeedsTotal-uint64(len(rep.FailingSeeds)), len(rep.FailingSeeds))
	}
	fmt.Fprintln(w, "verdict: FAIL")
}

func orNone(s string) string {
	if s == "" {
		return "no seeds"
	}
	return s
}

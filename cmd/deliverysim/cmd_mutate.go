package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/mutate"
)

// cmdMutate is mutation analysis: generate mutants of the engine, receiver
// and store code, run the blind sweep, the scenarios, (for the store) the
// conformance suite and, for what survives those, the mutated package's own
// unit tests against each, and report the kill matrix.
func (a *app) cmdMutate(args []string) (int, error) {
	fs := newFlagSet("mutate", a.stderr)
	pkgs := fs.String("pkg", "impl/engine,impl/receiver,impl/memstore", "packages to mutate, comma-separated, relative to the module root")
	seeds := fs.Int("seeds", 100, "blind-sweep seed budget per mutant (stops at the first failing seed)")
	first := fs.Uint64("first-seed", 1, "first seed of the pool (or of each blind sweep, with --pool 0)")
	pool := fs.Int("pool", 2000, "each mutant runs the first --seeds seeds of this many (from --first-seed) that run its site unmutated; 0 = seeds --first-seed.. in order, whatever they run")
	parallel := fs.Int("parallel", min(2, runtime.NumCPU()), "mutants run at once")
	jsonOut := fs.Bool("json", false, "print the JSON report on stdout")
	junit := fs.String("junit", "", "also write a JUnit XML report (one test case per mutant) to this file")
	list := fs.Bool("list", false, "only list the mutants (id, operator, change); run nothing")
	only := fs.String("only", "", "run only mutants whose id contains one of these comma-separated strings")
	timeout := fs.Duration("timeout", 0, "a mutant's harness step that finishes no seed, scenario or suite for this long is hung (default: 30s, and never more than 8x the unmutated run in all)")
	sample := fs.Int("sample", 1, "run every Nth mutant only (chosen by a hash of its id, so the same ones each time); the kill rate is then an estimate")
	unitTests := fs.Bool("unit-tests", true, "last step, for a mutant nothing else killed: the mutated package's own in-process Go unit tests (killed by unit-tests, counted apart as killed_unit_tests); false measures the harness alone")
	survivorsPath := fs.String("survivors", "", "reviewed survivors file (default: the mutate/survivors.yaml built in)")
	root := fs.String("root", "", "module root (default: the nearest directory above the working directory holding go.mod)")
	probe := fs.Bool("probe", false, "internal: run the harness once in this binary and print its verdict as JSON")
	seedList := fs.String("seed-list", "", "internal (--probe): the blind seeds to run, comma-separated, or none")
	cover := fs.Bool("cover", false, "internal: run --seeds seeds unmutated in this schemata binary and print which mutation sites each ran, as JSON")
	budget := fs.Int("budget", 100, "internal (--cover): seeds kept per site")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *junit != "" {
		if err := checkWritableFile("--junit", *junit); err != nil {
			return 2, usagef("%v", err)
		}
	}
	if *seeds < 1 {
		return 2, usagef("--seeds %d: use at least 1", *seeds)
	}
	if *cover {
		return 0, writeJSON(a.stdout, mutate.Cover(mutate.CoverOptions{FirstSeed: *first, Seeds: *seeds, Budget: *budget, Progress: a.stderr}))
	}
	if *probe {
		po := mutate.ProbeOptions{FirstSeed: *first, Seeds: *seeds, Progress: a.stderr}
		if *seedList != "" {
			po.SeedList = []uint64{}
			for _, f := range strings.Split(*seedList, ",") {
				if f == "none" {
					continue
				}
				n, err := strconv.ParseUint(f, 10, 64)
				if err != nil || n == 0 {
					return 2, usagef("--seed-list: %q is not a seed (a positive integer)", f)
				}
				po.SeedList = append(po.SeedList, n)
			}
		}
		return 0, writeJSON(a.stdout, mutate.Probe(po))
	}
	if *pool < 0 || (*pool > 0 && *pool < *seeds) {
		return 2, usagef("--pool %d: use 0 (no selection) or at least --seeds (%d)", *pool, *seeds)
	}
	if *parallel < 1 || *parallel > runtime.NumCPU() {
		return 2, usagef("--parallel %d: use 1 to %d (the number of CPUs)", *parallel, runtime.NumCPU())
	}
	dir, err := moduleRoot(*root)
	if err != nil {
		return 2, err
	}
	var ps []string
	for _, p := range strings.Split(*pkgs, ",") {
		p = strings.Trim(strings.TrimSpace(p), "/")
		p = strings.TrimPrefix(p, "./")
		if p == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, p)); err != nil || !st.IsDir() {
			return 2, usagef("--pkg: %s is not a package directory under %s (use paths like impl/engine)", p, dir)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return 2, usagef("--pkg: name at least one package, e.g. impl/engine")
	}
	surv, err := mutate.DefaultSurvivors()
	if *survivorsPath != "" {
		surv, err = mutate.LoadSurvivors(*survivorsPath)
	}
	if err != nil {
		return 2, err
	}
	var match func(mutate.Mutant) bool
	if *only != "" {
		subs := strings.Split(*only, ",")
		match = func(m mutate.Mutant) bool {
			for _, s := range subs {
				if s = strings.TrimSpace(s); s != "" && strings.Contains(m.ID, s) {
					return true
				}
			}
			return false
		}
	}
	if *sample < 1 {
		return 2, usagef("--sample %d: use 1 (every mutant) or more", *sample)
	}
	if *sample > 1 {
		inner := match
		match = func(m mutate.Mutant) bool {
			return (inner == nil || inner(m)) && mutate.Sampled(m.ID, *sample)
		}
	}
	if *list {
		ms, err := mutate.List(dir, ps)
		if err != nil {
			return 2, err
		}
		var out []mutate.Mutant
		for _, m := range ms {
			if match == nil || match(m) {
				out = append(out, m)
			}
		}
		if *jsonOut {
			return 0, writeVersionedJSON(a.stdout, struct {
				Mutants []mutate.Mutant `json:"mutants"`
			}{out})
		}
		for _, m := range out {
			inv := ""
			if m.Invalid != "" {
				inv = "  [invalid: " + m.Invalid + "]"
			}
			fmt.Fprintf(a.stdout, "%s\t%s\t%s%s\n", m.ID, m.Func, m.Change, inv)
		}
		fmt.Fprintf(a.stdout, "%d mutants\n", len(out))
		return 0, nil
	}
	rep, err := mutate.Run(a.ctx, mutate.Options{Root: dir, Pkgs: ps, Seeds: *seeds, FirstSeed: *first, Pool: *pool,
		Parallel: *parallel, Stall: *timeout, Sample: *sample, Only: match, Survivors: surv, Progress: a.stderr, NoUnitTests: !*unitTests})
	if a.interrupted() {
		// The mutants that finished, and nothing about the rest; the
		// analysis' temporary folder is gone with mutate.Run.
		if rep == nil {
			rep = &mutate.Report{Packages: ps, Mutants: []mutate.Outcome{}, Interrupted: true}
		}
		if *jsonOut {
			_ = writeVersionedJSON(a.stdout, rep)
		} else {
			printMutate(a.stdout, rep)
			fmt.Fprintln(a.stdout, "interrupted: the mutants not listed did not run")
		}
		return exitInterrupted, nil
	}
	if err != nil {
		return 2, err
	}
	if *junit != "" {
		if err := writeMutateJUnit(*junit, rep); err != nil {
			return 2, err
		}
	}
	if *jsonOut {
		if err := writeVersionedJSON(a.stdout, rep); err != nil {
			return 2, err
		}
	} else {
		printMutate(a.stdout, rep)
	}
	// Every survivor must be reviewed (in the survivors file).
	for _, o := range rep.Mutants {
		if o.Status == mutate.Survived && o.Note == "" {
			return 1, nil
		}
	}
	return 0, nil
}

// moduleRoot finds the directory holding go.mod.
func moduleRoot(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		dir = wd
	}
	dir, _ = filepath.Abs(dir)
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", usagef("mutate: no go.mod at or above %s; run it from the deliverysim checkout or pass --root", dir)
		}
	}
}

func printMutate(w io.Writer, rep *mutate.Report) {
	fmt.Fprintf(w, "%-58s %-22s %-17s %5s  %s\n", "MUTANT (file:line:col)", "OPERATOR", "STATUS", "SEEDS", "KILLED BY")
	for _, o := range rep.Mutants {
		seeds := "-"
		if o.SeedsToKill > 0 {
			seeds = fmt.Sprint(o.SeedsToKill)
		}
		by := strings.TrimSpace(o.By + " " + o.Check)
		if o.Status == mutate.Survived || o.Status == mutate.Equivalent {
			by = o.Change
			if !o.Reached {
				by += " (site never ran)"
			}
		}
		if o.Status == mutate.Invalid {
			by = o.Detail
		}
		fmt.Fprintf(w, "%-58s %-22s %-17s %5s  %s\n", fmt.Sprintf("%s:%d:%d", o.File, o.Line, o.Col), o.Operator, o.Status, seeds, by)
	}
	if rep.Pool > 0 {
		fmt.Fprintf(w, "\nblind sweep: per mutant, the first %d of seeds %d..%d that run its site unmutated (stops at the first failing seed), then the scenario library", rep.Seeds, rep.FirstSeed, rep.FirstSeed+uint64(rep.Pool)-1)
	} else {
		fmt.Fprintf(w, "\nblind sweep: seeds %d..%d per mutant (stops at the first failing seed), then the scenario library", rep.FirstSeed, rep.FirstSeed+uint64(rep.Seeds)-1)
	}
	fmt.Fprintf(w, "; store packages also face the conformance suite on memstore")
	if len(rep.UnitTests) > 0 {
		fmt.Fprintf(w, "; then the mutated package's own unit tests (%s)", strings.Join(rep.UnitTests, ", "))
	}
	fmt.Fprintf(w, "; time bound %.0fs per step\n", rep.Timeout)
	fmt.Fprintf(w, "%-16s %7s %7s %8s %8s %10s %7s %9s\n", "PACKAGE", "MUTANTS", "KILLED", "TIMEOUT", "SURVIVED", "EQUIVALENT", "INVALID", "KILL RATE")
	var names []string
	for p := range rep.PerPackage {
		names = append(names, p)
	}
	sort.Strings(names)
	row := func(name string, t mutate.Totals) {
		fmt.Fprintf(w, "%-16s %7d %7d %8d %8d %10d %7d %8.1f%%\n", name, t.Mutants, t.Killed, t.KilledTimeout, t.Survived, t.Equivalent, t.Invalid, 100*t.KillRate)
	}
	for _, p := range names {
		row(p, *rep.PerPackage[p])
	}
	row("all", rep.Totals)
	fmt.Fprintln(w, "kill rate = killed (timeouts included: a hang fails any bounded run) / (mutants - invalid - equivalent)")
	if t := rep.Totals; t.KilledUnitTests > 0 {
		fmt.Fprintf(w, "%d of the %d killed only by their package's unit tests (the harness alone: %d killed)\n", t.KilledUnitTests, t.Killed, t.Killed-t.KilledUnitTests)
	}
	for _, s := range rep.Stale {
		fmt.Fprintln(w, "stale survivors entry: "+s)
	}
	unreviewed := 0
	for _, o := range rep.Mutants {
		if o.Status == mutate.Survived && o.Note == "" {
			unreviewed++
		}
	}
	if unreviewed > 0 {
		fmt.Fprintf(w, "%d survivors are not in the survivors file: review each (equivalent, or open with what would kill it)\n", unreviewed)
	}
	fmt.Fprintf(w, "wall time %s\n", time.Duration(rep.Seconds*float64(time.Second)).Round(time.Second))
}

// writeMutateJUnit writes one suite per package and one test case per
// mutant: a survivor that is not equivalent fails, an invalid or
// equivalent one is skipped.
func writeMutateJUnit(path string, rep *mutate.Report) error {
	byPkg, took := map[string][]xunitCase{}, map[string]float64{}
	for _, o := range rep.Mutants {
		took[o.Package] += o.Seconds
		c := xunitCase{Name: o.ID, Classname: "mutate." + strings.ReplaceAll(o.Package, "/", "."),
			Time: fmt.Sprintf("%.3f", o.Seconds)}
		switch o.Status {
		case mutate.Survived:
			c.Failure = &xunitMessage{Message: "survived: " + o.Change, Type: "survived"}
		case mutate.Equivalent, mutate.Invalid:
			c.Skipped = &xunitMessage{Message: o.Status}
		}
		byPkg[o.Package] = append(byPkg[o.Package], c)
	}
	out := xunitSuites{Name: "deliverysim mutate"}
	for _, p := range rep.Packages {
		out.Suites = append(out.Suites, suite("mutate/"+p, time.Duration(took[p]*float64(time.Second)), byPkg[p]))
	}
	if err := writeJUnit(path, out); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}

package cause

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/scenarios"
	"github.com/deliverysim/deliverysim/sim"
)

// checkReport holds what every decisive step must satisfy: no later than
// the first violation, every continuation after it failing, some
// continuation after the step before it passing, and, for a known-bug
// variant, not before the variant first acted.
func checkReport(t *testing.T, name string, cfg sim.Config, rep *Report) {
	t.Helper()
	if !rep.Sealed {
		t.Errorf("%s: not sealed at its first violation (step %d): %d of %d continuations fail", name, rep.FirstViolationStep, rep.After.Failed, rep.After.Runs)
		return
	}
	if rep.DecisiveStep > rep.FirstViolationStep {
		t.Errorf("%s: decisive step %d after the first violation's %d", name, rep.DecisiveStep, rep.FirstViolationStep)
	}
	if rep.After.Runs != rep.Trials || rep.After.Failed != rep.Trials || rep.After.Step != rep.DecisiveStep {
		t.Errorf("%s: after the decisive step %d, %d of %d continuations fail; want all %d", name, rep.DecisiveStep, rep.After.Failed, rep.After.Runs, rep.Trials)
	}
	if rep.DecisiveStep > 0 {
		if b := rep.Before; b == nil || b.Step != rep.DecisiveStep-1 || !b.Complete || b.Failed >= b.Runs {
			t.Errorf("%s: the step before the decisive one: %+v; want a complete probe of step %d with a passing continuation", name, b, rep.DecisiveStep-1)
		}
	}
	if len(rep.Records) == 0 || rep.RecordsStep > rep.DecisiveStep {
		t.Errorf("%s: no trace record of the decisive step %d or before it (records of step %d)", name, rep.DecisiveStep, rep.RecordsStep)
	}
	if cfg.Bugs == (engine.Bugs{NoReceiverDedup: cfg.Bugs.NoReceiverDedup}) {
		return
	}
	acts, ok, err := BugActs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("%s: the variant never acted", name)
	} else if rep.DecisiveStep < acts {
		t.Errorf("%s: decisive step %d before the variant first acted (step %d)", name, rep.DecisiveStep, acts)
	}
}

// Every known-bug variant, on the library scenario that catches it.
func TestDecisiveStepOfEveryKnownBug(t *testing.T) {
	lib, err := scenarios.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range scenarios.Variants() {
		found := false
		for _, sc := range lib {
			for _, c := range sc.Catches {
				if c.Bug != v.Name || found {
					continue
				}
				found = true
				cfg, err := sc.Build(v.Name)
				if err != nil {
					t.Fatal(err)
				}
				rep, err := Find(cfg, Options{})
				if err != nil {
					t.Fatalf("%s on %s: %v", v.Name, sc.Name, err)
				}
				checkReport(t, v.Name+" on "+sc.Name, cfg, rep)
				t.Logf("%-28s %-48s decisive %4d, first violation %4d, p %d/%d -> %d/%d, %d runs", v.Name, sc.Name,
					rep.DecisiveStep, rep.FirstViolationStep, beforeFailed(rep), beforeRuns(rep), rep.After.Failed, rep.After.Runs, rep.Runs)
			}
		}
		if !found {
			t.Errorf("no library scenario catches %s", v.Name)
		}
	}
}

func beforeFailed(r *Report) int {
	if r.Before == nil {
		return r.After.Failed
	}
	return r.Before.Failed
}

func beforeRuns(r *Report) int {
	if r.Before == nil {
		return r.After.Runs
	}
	return r.Before.Runs
}

// failingSeeds are 20 seeds that fail under the variants they are listed
// with (blind seeds, drawn plans: not scenarios).
var failingSeeds = []struct {
	seed uint64
	bug  string
}{
	{1, "delete-before-send"}, {2, "delete-before-send"}, {3, "delete-before-send"}, {4, "delete-before-send"}, {5, "delete-before-send"},
	{1, "no-requeue-on-failure"}, {3, "no-requeue-on-failure"}, {4, "no-requeue-on-failure"}, {5, "no-requeue-on-failure"}, {7, "no-requeue-on-failure"},
	{3, "unbounded-retry"}, {4, "unbounded-retry"}, {5, "unbounded-retry"}, {8, "unbounded-retry"},
	{2, "fresh-sync-on-boot"}, {4, "fresh-sync-on-boot"}, {6, "fresh-sync-on-boot"}, {7, "fresh-sync-on-boot"},
	{5, "breaker-drops-when-open"}, {8, "breaker-drops-when-open"},
}

func seedConfig(t testing.TB, seed uint64, bug string) sim.Config {
	bugs, _, err := scenarios.ParseBugs([]string{bug})
	if err != nil {
		t.Fatal(err)
	}
	return sim.Config{Seed: seed, Bugs: bugs}
}

func TestDecisiveStepOfTwentyFailingSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("about a thousand runs")
	}
	for _, fs := range failingSeeds {
		cfg := seedConfig(t, fs.seed, fs.bug)
		rep, err := Find(cfg, Options{})
		if err != nil {
			t.Fatalf("seed %d %s: %v", fs.seed, fs.bug, err)
		}
		checkReport(t, fmt.Sprintf("%s seed %d", fs.bug, fs.seed), cfg, rep)
		t.Logf("seed %d %-24s decisive %4d, first violation %4d (%s), p %d/%d -> %d/%d, %d runs", fs.seed, fs.bug,
			rep.DecisiveStep, rep.FirstViolationStep, rep.Invariant, beforeFailed(rep), beforeRuns(rep), rep.After.Failed, rep.After.Runs, rep.Runs)
	}
}

// The search is deterministic: the same run gives the same report.
func TestFindIsDeterministic(t *testing.T) {
	cfg := seedConfig(t, 5, "delete-before-send")
	a, err := Find(cfg, Options{Trials: 8})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Find(cfg, Options{Trials: 8})
	if err != nil {
		t.Fatal(err)
	}
	a.Seconds, b.Seconds = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two searches differ:\n%+v\n%+v", a, b)
	}
}

func TestPassingRunIsRefused(t *testing.T) {
	if _, err := Find(sim.Config{Seed: 1}, Options{Trials: 2}); err != ErrPasses {
		t.Errorf("a passing run: %v; want ErrPasses", err)
	}
}

// BenchmarkCausePerFailingSeed: what cause costs per failing seed, in
// continuations and seconds (the seeds of TestDecisiveStepOfTwentyFailingSeeds
// under delete-before-send and no-requeue-on-failure).
func BenchmarkCausePerFailingSeed(b *testing.B) {
	seeds := failingSeeds[:10]
	runs := 0
	for i := 0; i < b.N; i++ {
		fs := seeds[i%len(seeds)]
		rep, err := Find(seedConfig(b, fs.seed, fs.bug), Options{})
		if err != nil {
			b.Fatal(err)
		}
		runs += rep.Runs
	}
	b.ReportMetric(float64(runs)/float64(b.N), "runs/seed")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/seed")
}

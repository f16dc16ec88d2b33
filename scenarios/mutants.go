package scenarios

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/sim"
)

// MutantOptions bound the blind sweep each variant gets.
type MutantOptions struct {
	FirstSeed uint64 // default 1
	Seeds     int    // seeds tried at most (default 300)
	Parallel  int    // seeds simulated at once (default GOMAXPROCS)
	// Only, if set, restricts the report to these variants.
	Only []string
	// Each, if set, is given each variant's report as it is made; false
	// stops there (the reports so far are returned).
	Each func(MutantReport) bool
}

// ScenarioCatch is one library scenario run with a variant switched on.
type ScenarioCatch struct {
	Scenario  string   `json:"scenario"`
	Expected  string   `json:"expected_invariant"`
	Caught    bool     `json:"caught"`
	Got       []string `json:"got"`
	Reproduce string   `json:"reproduce"`
}

// MutantReport says whether the harness caught one known-bug variant: by a
// blind random sweep (no hint where to look) and by the library scenarios
// that claim to show it.
type MutantReport struct {
	Name                  string          `json:"name"`
	Source                string          `json:"source"`
	Caught                bool            `json:"caught"`
	CaughtByScenario      bool            `json:"caught_by_scenario"`
	Invariant             string          `json:"invariant"`
	FirstFailingSeed      *uint64         `json:"first_failing_seed"`
	SeedsToFirstFailure   int             `json:"seeds_to_first_failure"`
	SecondsToFirstFailure float64         `json:"seconds_to_first_failure"`
	SeedsTried            int             `json:"seeds_tried"`
	FirstViolation        string          `json:"first_violation,omitempty"`
	Scenarios             []ScenarioCatch `json:"scenarios"`
	Reproduce             string          `json:"reproduce,omitempty"`
	Error                 string          `json:"error,omitempty"`
}

// Escaped reports whether the variant got past the harness.
func (r MutantReport) Escaped() bool { return !r.Caught || !r.CaughtByScenario }

// Mutants runs every known-bug variant against the library scenarios that
// claim to catch it and against a blind sweep of random seeds, which stops
// at the first failing seed.
func Mutants(opts MutantOptions) ([]MutantReport, error) {
	if opts.FirstSeed == 0 {
		opts.FirstSeed = 1
	}
	if opts.Seeds <= 0 {
		opts.Seeds = 300
	}
	if opts.Parallel <= 0 {
		opts.Parallel = runtime.GOMAXPROCS(0)
	}
	lib, err := All()
	if err != nil {
		return nil, err
	}
	var out []MutantReport
	for _, v := range Variants() {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, v.Name) {
			continue
		}
		rep := MutantReport{Name: v.Name, Source: v.Source, Scenarios: []ScenarioCatch{}}
		for _, s := range lib {
			for _, c := range s.Catches {
				if c.Bug != v.Name {
					continue
				}
				sc := ScenarioCatch{Scenario: s.Name, Expected: c.Invariant, Got: []string{},
					Reproduce: fmt.Sprintf("go run ./cmd/deliverysim run --scenario %s --bugs %s", s.Name, v.Name)}
				r, err := s.Run(v.Name)
				if err != nil {
					rep.Error = err.Error()
				} else {
					sc.Got = Invariants(r)
					sc.Caught = slices.Contains(sc.Got, c.Invariant)
				}
				rep.CaughtByScenario = rep.CaughtByScenario || sc.Caught
				rep.Scenarios = append(rep.Scenarios, sc)
			}
		}
		blindSweep(v, opts, &rep)
		out = append(out, rep)
		if opts.Each != nil && !opts.Each(rep) {
			break
		}
	}
	return out, nil
}

// blindSweep simulates seeds in order, several at once, and keeps the
// lowest failing one; seeds above a known failure are not started.
func blindSweep(v Variant, opts MutantOptions, rep *MutantReport) {
	var bugs = v.Set
	start := time.Now()
	var mu sync.Mutex
	next := 0
	best := -1
	var bestRes *sim.Result
	var bestAt time.Duration
	tried := 0
	var wg sync.WaitGroup
	for range opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				if i >= opts.Seeds || (best >= 0 && i > best) {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				cfg := sim.Config{Seed: opts.FirstSeed + uint64(i), NoTrace: true} // reads the verdict only
				bugs(&cfg.Bugs)
				r, err := sim.Run(cfg)
				mu.Lock()
				tried++
				if err != nil && rep.Error == "" {
					rep.Error = fmt.Sprintf("seed %d: %v", cfg.Seed, err)
				}
				if err == nil && len(r.Violations) > 0 && (best < 0 || i < best) {
					best, bestRes, bestAt = i, r, time.Since(start)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.SeedsTried = tried
	if best < 0 {
		return
	}
	seed := opts.FirstSeed + uint64(best)
	rep.Caught = true
	rep.FirstFailingSeed = &seed
	rep.SeedsToFirstFailure = best + 1
	rep.SecondsToFirstFailure = bestAt.Seconds()
	rep.Invariant = bestRes.Violations[0].Invariant
	rep.FirstViolation = bestRes.Violations[0].String()
	rep.Reproduce = fmt.Sprintf("go run ./cmd/deliverysim run --seed %d --bugs %s", seed, v.Name)
}

package mutate

import (
	"fmt"
	"io"
	"strings"

	"github.com/deliverysim/deliverysim/mutate/schema"
	"github.com/deliverysim/deliverysim/scenarios"
	"github.com/deliverysim/deliverysim/sim"
)

// ProbeOptions are one probe's budget.
type ProbeOptions struct {
	// Progress, if set, gets one line per seed and per scenario finished:
	// the runner reads it to tell a slow run from a hung one.
	Progress io.Writer

	FirstSeed uint64 // default 1
	Seeds     int    // the blind sweep's seed budget
	// SeedList, if not nil, replaces FirstSeed and Seeds: the seeds of the
	// pool that run the mutant's site (Cover), possibly none.
	SeedList []uint64
	// NoScenarios skips the scenario library and the known-bug variants.
	NoScenarios bool
}

// knownBugSeeds is the blind-sweep budget per known-bug variant, as
// `deliverysim mutants` gives it.
const knownBugSeeds = 300

// ProbeResult is what the harness saw of one build: the first check that
// failed, if any. A probe runs inside the (mutated) binary; the runner
// reads its JSON.
type ProbeResult struct {
	Killed bool `json:"killed"`
	// By is the harness part that failed: "sweep" (an invariant on a blind
	// seed), "sweep-error" (a seed could not run to its end), "scenario",
	// or "known-bugs" (a known-bug variant is no longer caught, as
	// `deliverysim mutants` requires: the mutant hides a bug the harness is
	// known to catch, or changes a variant's own branch), or "determinism"
	// (a seed run twice gave two different traces).
	By          string `json:"by,omitempty"`
	Check       string `json:"check,omitempty"` // invariant(s), or scenario: invariants
	Seed        uint64 `json:"seed,omitempty"`
	SeedsToKill int    `json:"seeds_to_kill,omitempty"`
	Detail      string `json:"detail,omitempty"`
	SeedsRun    int    `json:"seeds_run"`
	// Reached: the mutant's site ran at least once in what was run.
	Reached bool `json:"reached"`
}

// Probe runs the blind sweep (seeds in order, stopping at the first
// failing one), then every seed of it again (its trace must not change),
// then, if nothing failed, every library scenario and every
// regression scenario, then the known-bug check of `deliverysim mutants`
// (each variant caught by a blind sweep and by a scenario that claims it).
func Probe(opts ProbeOptions) ProbeResult {
	if opts.FirstSeed == 0 {
		opts.FirstSeed = 1
	}
	seeds := opts.SeedList
	if seeds == nil {
		for i := 0; i < opts.Seeds; i++ {
			seeds = append(seeds, opts.FirstSeed+uint64(i))
		}
	}
	var res ProbeResult
	hashes := make([]string, 0, len(seeds))
	for i, seed := range seeds {
		r, err := sim.Run(sim.Config{Seed: seed, TraceHashOnly: true}) // the hash is all the determinism pass compares
		res.SeedsRun++
		opts.tick("seed", seed)
		if err != nil {
			res.Killed, res.By, res.Seed, res.SeedsToKill = true, "sweep-error", seed, i+1
			res.Detail = oneLine(err.Error())
			res.Reached = schema.Reached()
			return res
		}
		if len(r.Violations) > 0 {
			res.Killed, res.By, res.Seed, res.SeedsToKill = true, "sweep", seed, i+1
			res.Check = strings.Join(scenarios.Invariants(r), ",")
			res.Detail = oneLine(r.Violations[0].String())
			res.Reached = schema.Reached()
			return res
		}
		hashes = append(hashes, r.TraceHash)
	}
	// Determinism is the product's promise (the same seed gives the same
	// trace on every run): each seed again, its trace compared. A mutant
	// that lets map iteration order or an ill-formed sort reach the output
	// differs between the two runs.
	for i, want := range hashes {
		seed := seeds[i]
		r, err := sim.Run(sim.Config{Seed: seed, TraceHashOnly: true})
		opts.tick("seed", seed)
		if err == nil && r.TraceHash != want {
			res.Killed, res.By, res.Check, res.Seed, res.SeedsToKill = true, "determinism", "same-seed-same-trace", seed, i+1
			res.Detail = fmt.Sprintf("seed %d gave two different traces (%.12s, then %.12s)", seed, want, r.TraceHash)
			res.Reached = schema.Reached()
			return res
		}
	}
	if opts.NoScenarios {
		res.Reached = schema.Reached()
		return res
	}
	lib, err := scenarios.All()
	if err == nil {
		var reg []*scenarios.Scenario
		reg, err = scenarios.Regressions()
		lib = append(lib, reg...)
	}
	if err != nil {
		res.Killed, res.By, res.Detail = true, "scenario", oneLine(err.Error())
		res.Reached = schema.Reached()
		return res
	}
	for _, s := range lib {
		r, err := s.Run()
		opts.tick("scenario", 0)
		if err != nil {
			res.Killed, res.By, res.Check, res.Detail = true, "scenario", s.Name, oneLine(err.Error())
			res.Reached = schema.Reached()
			return res
		}
		if ok, note := s.Matches(r); !ok {
			res.Killed, res.By, res.Detail = true, "scenario", oneLine(note)
			res.Check = s.Name + ": " + strings.Join(scenarios.Invariants(r), ",")
			res.Reached = schema.Reached()
			return res
		}
	}
	// One seed at a time (the runner already runs mutants side by side),
	// a progress line after each variant, and no variant after the first
	// that escapes.
	reps, err := scenarios.Mutants(scenarios.MutantOptions{FirstSeed: 1, Seeds: knownBugSeeds, Parallel: 1,
		Each: func(rep scenarios.MutantReport) bool {
			opts.tick("variant", 0)
			return rep.Error == "" && !rep.Escaped()
		}})
	switch last := len(reps) - 1; {
	case err != nil:
		res.Killed, res.By, res.Check, res.Detail = true, "known-bugs", "", oneLine(err.Error())
	case last < 0:
	case reps[last].Error != "":
		res.Killed, res.By, res.Check, res.Detail = true, "known-bugs", reps[last].Name, oneLine(reps[last].Error)
	case reps[last].Escaped():
		r := reps[last]
		res.Killed, res.By, res.Check = true, "known-bugs", r.Name
		res.Detail = fmt.Sprintf("known-bug variant %s escaped: caught by the blind sweep %v (%d seeds), by a scenario %v",
			r.Name, r.Caught, r.SeedsTried, r.CaughtByScenario)
	}
	res.Reached = schema.Reached()
	return res
}

func (o ProbeOptions) tick(what string, n uint64) {
	if o.Progress != nil {
		fmt.Fprintln(o.Progress, what, n)
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

// CoverOptions are one coverage pass over part of the seed pool.
type CoverOptions struct {
	Progress  io.Writer
	FirstSeed uint64
	Seeds     int
	// Budget caps the seeds kept per site: the first Budget of the pool
	// that run it.
	Budget int
}

// CoverResult maps each mutation site that ran to the seeds that ran it,
// in seed order.
type CoverResult struct {
	Sites map[int][]uint64 `json:"sites"`
	// Failed is the first seed of the unmutated build that failed: the pool
	// must be clean, or a mutant would look killed by what the original
	// does.
	Failed string `json:"failed,omitempty"`
}

// Cover runs the pool's seeds unmutated in a schemata build with coverage
// on (schema.CoverEnvVar) and records, for each site, the seeds that ran
// it.
func Cover(opts CoverOptions) CoverResult {
	res := CoverResult{Sites: map[int][]uint64{}}
	if !schema.Covering() {
		res.Failed = "coverage is off: run the schemata build with " + schema.CoverEnvVar + " set to the number of sites"
		return res
	}
	for i := 0; i < opts.Seeds; i++ {
		seed := opts.FirstSeed + uint64(i)
		schema.Covered() // what a previous seed left
		// Only the verdict and the sites are read: no trace.
		r, err := sim.Run(sim.Config{Seed: seed, NoTrace: true})
		opts.tick("seed", seed)
		switch {
		case err != nil:
			res.Failed = fmt.Sprintf("seed %d: %s", seed, oneLine(err.Error()))
			return res
		case len(r.Violations) > 0:
			res.Failed = fmt.Sprintf("seed %d: %s", seed, oneLine(r.Violations[0].String()))
			return res
		}
		for _, k := range schema.Covered() {
			if len(res.Sites[k]) < opts.Budget {
				res.Sites[k] = append(res.Sites[k], seed)
			}
		}
	}
	return res
}

func (o CoverOptions) tick(what string, n uint64) {
	ProbeOptions{Progress: o.Progress}.tick(what, n)
}

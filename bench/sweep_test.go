package bench

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/sim"
)

// sweepSeeds is how many seeds one iteration of BenchmarkSweep runs
// (seeds 1..sweepSeeds: a fixed mix, so ns/op compares across runs).
const sweepSeeds = 200

// BenchmarkSweep measures what `deliverysim sweep` does per seed: seeds
// 1-200's drawn workloads and fault plans, each simulated, checked by the
// oracle, its coverage counted and no trace kept (sim.Config.NoTrace: a
// sweep without --check-determinism reads not even the trace's hash), one
// seed after another on one goroutine (a sweep runs one seed per worker,
// so seeds/s here is the speed per core; `sweep --parallel 1` is the same
// work plus the report). A seed with a violation fails the benchmark: a
// speed-up that breaks a check on the reference engine is not one.
//
// stages=off reports seeds/s. stages=on also splits the wall time between
// the stages of a run (sim.StageTimer: exclusive time, the clock read at
// every stage boundary) and reports each stage's share in percent: sim
// (event loop, upstream, bots with the receiver SDK, fault injection,
// store wrappers, contract probes), engine (Engine.Step with its store
// calls), oracle (Checker.Observe and Finish), coverage and trace. The
// clock reads slow that run down (compare its seeds/s with stages=off),
// mostly inside the short oracle and trace calls, so their shares are an
// upper bound.
//
// The baseline of issue 29 is the sweep of commit 7a76aaf (before the
// oracle, coverage and workload work). It cannot run in this process (it
// has other packages and draws other workloads from the same seeds), so it
// is measured as a binary beside this one, alternately, on one machine in
// one sitting:
//
//	git worktree add /tmp/wt-old 7a76aaf && (cd /tmp/wt-old && go build -o /tmp/dsim-old ./cmd/deliverysim)
//	go build -o /tmp/dsim-new ./cmd/deliverysim
//	for i in 1 2 3; do for b in old new; do
//		/usr/bin/time -f "$b %e s" /tmp/dsim-$b sweep --seeds 1-1000 --parallel 2 --json >/dev/null
//	done; done
//
// The figure is the ratio of the medians (new / old; the goal is <= 1.0).
// This benchmark's seeds/s is the in-process counterpart of the new
// binary's `--parallel 1` rate (seeds / wall seconds).
func BenchmarkSweep(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(sim.SweepGCPercent))
	for _, timed := range []bool{false, true} {
		name := "stages=off"
		if timed {
			name = "stages=on"
		}
		b.Run(name+"/seeds=200", func(b *testing.B) {
			var st *sim.StageTimer
			if timed {
				start := time.Now()
				st = &sim.StageTimer{Now: func() time.Duration { return time.Since(start) }}
			}
			seeds := 0
			for range b.N {
				for seed := uint64(1); seed <= sweepSeeds; seed++ {
					if st != nil {
						st.Start()
					}
					r, err := sim.Run(sim.Config{Seed: seed, NoTrace: true, Stages: st})
					if st != nil {
						st.Stop()
					}
					if err != nil {
						b.Fatal(err)
					}
					if len(r.Violations) > 0 {
						b.Fatalf("seed %d broke an invariant on the reference engine: %v", seed, r.Violations[0])
					}
					seeds++
				}
			}
			b.ReportMetric(float64(seeds)/b.Elapsed().Seconds(), "seeds/s")
			if st == nil {
				return
			}
			var total time.Duration
			for _, d := range st.Spent {
				total += d
			}
			for s := sim.Stage(0); s < sim.NumStages; s++ {
				b.ReportMetric(100*float64(st.Spent[s])/float64(total), s.String()+"-pct")
			}
		})
	}
}

package bench

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/sim"
)

// BenchmarkSimulator measures the deterministic simulator: simulated
// events (upstream events produced) and deliveries per wall second, and
// the speedup, simulated time over wall time. scenario=week is the
// standard scenario (Week: 1000 bots, a week with retention);
// scenario=seeds runs the first 20 seeds' random workloads and fault
// plans, the mix CI sweeps.
func BenchmarkSimulator(b *testing.B) {
	b.Run("scenario=week/bots=1000", func(b *testing.B) {
		w, plan := Week()
		var simTime time.Duration
		var events, deliveries int
		for range b.N {
			r, err := sim.Run(sim.Config{Seed: 1, Workload: &w, Plan: &plan})
			if err != nil {
				b.Fatal(err)
			}
			if len(r.Violations) > 0 {
				b.Fatalf("the standard scenario broke an invariant: %v", r.Violations[0])
			}
			simTime += r.End.Sub(sim.Epoch)
			events += r.Counters.Events
			deliveries += r.Counters.Deliveries
		}
		reportSim(b, simTime, events, deliveries)
	})
	b.Run("scenario=seeds/seeds=20", func(b *testing.B) {
		var simTime time.Duration
		var events, deliveries int
		for range b.N {
			for seed := uint64(1); seed <= 20; seed++ {
				r, err := sim.Run(sim.Config{Seed: seed})
				if err != nil {
					b.Fatal(err)
				}
				simTime += r.End.Sub(sim.Epoch)
				events += r.Counters.Events
				deliveries += r.Counters.Deliveries
			}
		}
		reportSim(b, simTime, events, deliveries)
	})
}

func reportSim(b *testing.B, simTime time.Duration, events, deliveries int) {
	wall := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/wall, "sim-events/s")
	b.ReportMetric(float64(deliveries)/wall, "deliveries/s")
	b.ReportMetric(simTime.Seconds()/wall, "speedup")
}

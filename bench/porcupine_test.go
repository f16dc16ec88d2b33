package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// BenchmarkPorcupineCheck is the checker's cost on a 10,000-call history of
// 8 concurrent clients, recorded with the store suite's own workload
// (conformance.History): per-key partitioned (each key's calls checked on
// their own, in parallel) and unpartitioned (one search over all of them,
// which is NP-hard in general and given a time limit: decided=0 means it
// ran out of time, and ns/op is then the limit).
func BenchmarkPorcupineCheck(b *testing.B) {
	const ops, clients = 10000, 8
	history := conformance.History(memstore.New(), clients, ops/clients, 1)
	for _, c := range []struct {
		name        string
		partitioned bool
		timeout     time.Duration
	}{
		{"partitioned", true, 0},
		{"unpartitioned", false, 20 * time.Second},
	} {
		b.Run(fmt.Sprintf("mode=%s/ops=%d", c.name, ops), func(b *testing.B) {
			m := conformance.PorcupineModel(c.partitioned)
			decided := 0.0
			for range b.N {
				res, _ := porcupine.CheckOperationsVerbose(m, history, c.timeout)
				switch res {
				case porcupine.Ok:
					decided++
				case porcupine.Illegal:
					b.Fatal("memstore's history is not linearizable against model.Store")
				}
			}
			b.ReportMetric(decided/float64(b.N), "decided")
			b.ReportMetric(float64(ops)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

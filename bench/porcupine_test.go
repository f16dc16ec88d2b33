package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/impl/memstore"
)

// A short recorded history must check as linearizable when partitioned by
// key, and a history with a forged result must not: the benchmark below
// measures a check that can fail.
func TestRecordedHistoryChecks(t *testing.T) {
	h := recordHistory(memstore.New(), 4, 400, 7)
	if len(h) != 400 {
		t.Fatalf("recorded %d calls, want 400", len(h))
	}
	if res := porcupine.CheckOperations(storeModel(true), h); !res {
		t.Fatal("memstore's history is not linearizable against model.Store")
	}
	forged := append([]porcupine.Operation(nil), h...)
	for i, op := range forged {
		out := op.Output.(histOut)
		if out.err == nil && out.res.N > 0 {
			out.res.N += 5 // an Enqueue/Ack count no store could return
			forged[i].Output = out
			break
		}
	}
	if porcupine.CheckOperations(storeModel(true), forged) {
		t.Fatal("a forged result was accepted: the check cannot fail")
	}
}

// BenchmarkPorcupineCheck is the checker's cost on a 10,000-call history of
// 8 concurrent clients: per-key partitioned (each key's calls checked on
// their own, in parallel) and unpartitioned (one search over all of them,
// which is NP-hard in general and given a time limit: decided=0 means it
// ran out of time, and ns/op is then the limit).
func BenchmarkPorcupineCheck(b *testing.B) {
	const ops, clients = 10000, 8
	history := recordHistory(memstore.New(), clients, ops, 1)
	for _, c := range []struct {
		name        string
		partitioned bool
		timeout     time.Duration
	}{
		{"partitioned", true, 0},
		{"unpartitioned", false, 20 * time.Second},
	} {
		b.Run(fmt.Sprintf("mode=%s/ops=%d", c.name, ops), func(b *testing.B) {
			m := storeModel(c.partitioned)
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

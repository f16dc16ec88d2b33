package conformance

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/impl/memstore"
)

// The exported history and model (used by the checker benchmark) must
// accept a correct store's history, partitioned or not, and reject one with
// a forged result: a benchmark of a check that cannot fail measures nothing.
func TestHistoryChecksAndCanFail(t *testing.T) {
	h := History(memstore.New(), 4, 100, 7)
	if len(h) != 400 {
		t.Fatalf("recorded %d calls, want 400", len(h))
	}
	for _, partitioned := range []bool{true, false} {
		if !porcupine.CheckOperations(PorcupineModel(partitioned), h) {
			t.Fatalf("memstore's history is not linearizable (partitioned=%v)", partitioned)
		}
	}
	forged := append([]porcupine.Operation(nil), h...)
	changed := false
	for i, op := range forged {
		out := op.Output.(lzOut)
		if out.err == nil && out.res.N > 0 {
			out.res.N += 5 // an Enqueue/Ack count no store could return
			forged[i].Output = out
			changed = true
			break
		}
	}
	if !changed {
		t.Fatal("no call with a count to forge; the workload changed")
	}
	if porcupine.CheckOperations(PorcupineModel(true), forged) {
		t.Fatal("a forged result was accepted: the check cannot fail")
	}
}

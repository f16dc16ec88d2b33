package pgstore

import (
	"testing"

	"github.com/deliverysim/deliverysim/sim"
)

// The simulator's boundary catalogue probes enqueues of 31, 32 and 33 rows
// because pgstore changes plan at 32 (COPY, the guarded range ack): the
// probe must move with the constants.
func TestStoreBatchRowsIsPgstores(t *testing.T) {
	for name, v := range map[string]int{"defaultCopyMinRows": defaultCopyMinRows, "defaultRangeMinKeys": defaultRangeMinKeys, "probeMinKeys": probeMinKeys} {
		if v != sim.StoreBatchRows {
			t.Errorf("pgstore's %s is %d, sim.StoreBatchRows %d: move the boundary probes (sim/boundaries_lists.go) with it", name, v, sim.StoreBatchRows)
		}
	}
}

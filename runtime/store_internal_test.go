package runtime

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// The runtime's bounding wrapper must keep every optional capability of
// the store it wraps: a dropped one silently turns an engine setting off
// (AckDelay without HandOffWriter defers nothing).
func TestTimedStoreKeepsTheStoresCapabilities(t *testing.T) {
	s := wrapStore(memstore.New(), time.Second, func(string) {}, nil)
	if hidden := impl.HiddenCapabilities(s); len(hidden) != 0 {
		t.Fatalf("the runtime's store wrapper hides %v of the memory store", hidden)
	}
	for name, ok := range map[string]bool{
		"LeasingEnqueuer":   func() bool { _, ok := impl.AsLeasingEnqueuer(s); return ok }(),
		"HandOffWriter":     func() bool { _, ok := impl.AsHandOffWriter(s); return ok }(),
		"BlindCursorWriter": func() bool { _, ok := impl.AsBlindCursorWriter(s); return ok }(),
	} {
		if !ok {
			t.Errorf("the wrapped store lost %s", name)
		}
	}
}

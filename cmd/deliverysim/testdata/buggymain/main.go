// Command buggymain certifies memstore with the suite's planted
// blind-cursor-upsert bug (a cursor write with no monotonic guard)
// through conformance.Main: a store that fails, so that the artifacts
// tests see where a failure's files go (TestCertifyArtifacts).
package main

import (
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

func main() {
	base := conformance.Factory{
		Name: "memstore",
		New: func(t testing.TB) impl.Store {
			s := memstore.New()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}
	for _, f := range conformance.BuggyBackends(base) {
		if strings.HasSuffix(f.Name, conformance.BugBlindCursorUpsert) {
			conformance.Main(f)
		}
	}
	panic("no " + conformance.BugBlindCursorUpsert + " backend")
}

// Command outside-store is an example of certifying a store that is not
// deliverysim's: listStore (store.go) was written from the public
// documents alone, and this main is all it takes to give it the report,
// flags and exit codes of `deliverysim certify`:
//
//	go run ./examples/outside-store --json --junit certify.xml
//
// A Postgres-backed store would pass pgcert.Factories(name, dsn, open,
// features) to conformance.Main instead (a schema per check, the suite
// once per session time zone).
package main

import (
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
)

func main() {
	conformance.Main(conformance.Factory{
		Name: "liststore",
		New: func(t testing.TB) impl.Store {
			s := newListStore()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Features: conformance.Features{Concurrent: true},
	})
}

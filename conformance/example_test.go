package conformance_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/conformance/pgcert"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// Certify a store from a program of your own: describe it with a Factory
// and hand that to Main in your main function. MainArgs is the same with
// the arguments and output given; here it certifies memstore (stand in
// your own store) on the contract and the state machine and prints the
// exit code Main would exit with.
func ExampleMainArgs() {
	mystore := conformance.Factory{
		Name: "mystore",
		New: func(t testing.TB) impl.Store {
			s := memstore.New() // your store, fresh and empty
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		// Declare what your store has: Contract/Capabilities fails a
		// store that has an optional capability it does not declare, as
		// memstore has all of them.
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}
	// In your main: conformance.Main(mystore), which reads --json,
	// --junit FILE, --checks N, --only LIST, --seed N from os.Args.
	code := conformance.MainArgs([]string{"--only", "Contract,StateMachine", "--checks", "10"}, io.Discard, os.Stderr, mystore)
	fmt.Println("exit", code)
	// Output: exit 0
}

// A Postgres-backed store: pgcert gives every check a schema of its own
// (created empty, dropped afterwards) and runs the suite once per session
// time zone. Open is yours; here it is pgstore's.
func ExampleMain_postgres() {
	open := func(ctx context.Context, dsn, schema string) (impl.Store, error) {
		return pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Migrate: true})
	}
	// postgres://user@host:5432/db?sslmode=disable
	dsn := os.Getenv("MYSTORE_DSN")
	// pgstore's capabilities; declare your own store's.
	features := conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true}
	conformance.Main(pgcert.Factories("mystore", dsn, open, features)...)
}

package main

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/chaos"
)

// The reference engine under chaos runs with exactly the configuration the
// checker judges it by: serve's command line is rendered from it, and
// parsing that command line as serve does gives it back, setting by
// setting (a setting missing from the flags, or rendered in a form serve
// reads differently, fails here).
func TestChaosServeArgsRoundTripTheEngineConfig(t *testing.T) {
	want := chaos.ReferenceEngine()
	odd := want
	odd.Multiplier, odd.JitterFraction, odd.BreakerFailures, odd.ClockSkewBudget = 1.5, 0.25, 7, 1500*time.Millisecond
	odd.RetentionTTL, odd.MaxInFlightPerBot, odd.BreakerCloseAfter, odd.AckDelay = 90*time.Minute, 3, 2, 5*time.Millisecond
	for _, c := range []engine.Config{want, odd, engine.DefaultConfig()} {
		args := chaosServeArgs("", "queued", c)
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f serveFlags
		f.register(fs)
		if err := fs.Parse(args[1:]); err != nil {
			t.Fatalf("serve does not parse the chaos command line %v: %v", args, err)
		}
		got, err := f.engineConfig()
		if err != nil {
			t.Fatalf("serve refuses the chaos command line %v: %v", args, err)
		}
		// Only the tunable settings travel on the command line.
		got.Node, got.Clock, got.Rand, got.CrashHook, got.HandOff, got.CursorMode, got.Bugs = c.Node, c.Clock, c.Rand, c.CrashHook, c.HandOff, c.CursorMode, c.Bugs
		if !reflect.DeepEqual(got, c) {
			t.Errorf("serve runs with\n %+v\nbut the checker assumes\n %+v\n(args %v)", got, c, args)
		}
	}
}

package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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

// An engine under certification is told its declared settings once, in
// one unit: every setting as DELIVERYSIM_<FLAG>, durations in integer
// milliseconds under DELIVERYSIM_<FLAG>_MS.
func TestChaosSettingsEnv(t *testing.T) {
	eng := chaos.ReferenceEngine()
	eng.MaxAttempts = 5
	env := settingsEnv(eng)
	for _, want := range []string{"DELIVERYSIM_MAX_ATTEMPTS=5", "DELIVERYSIM_WEBHOOK_TIMEOUT_MS=500", "DELIVERYSIM_INITIAL_BACKOFF_MS=100",
		"DELIVERYSIM_MAX_BACKOFF_MS=1000", "DELIVERYSIM_LEASE_MS=3000", "DELIVERYSIM_TIMESTAMP_LOOKBACK_MS=5000"} {
		if !slices.Contains(env, want) {
			t.Errorf("settings env lacks %s: %v", want, env)
		}
	}
	for _, e := range env {
		if strings.HasSuffix(strings.SplitN(e, "=", 2)[1], "s") {
			t.Errorf("%s: a duration outside the _MS form", e)
		}
	}
}

// chaos --replay: the report's args, parsed again, give back the same
// workload and declared settings; a flag given on the command line wins.
func TestChaosReplayArgs(t *testing.T) {
	a := &app{stderr: io.Discard, getenv: func(string) string { return "" }}
	f, _, err := a.parseChaos([]string{"--seed", "7", "--duration", "12s", "--bots", "5", "--max-attempts", "4", "--faults", "crash,webhook-5xx"})
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--seed", "7", "--duration", f.duration.String(), "--bots", "5", "--faults", f.faultKinds}, settingArgs(f.eng)...)
	dir := t.TempDir()
	rep := filepath.Join(dir, "r.json")
	b, _ := json.Marshal(chaos.Report{Args: args})
	if err := os.WriteFile(rep, b, 0o644); err != nil {
		t.Fatal(err)
	}
	g, prev, err := a.parseChaos([]string{"--replay", rep, "--rate", "9"})
	if err != nil || prev == nil {
		t.Fatalf("replay: %v", err)
	}
	if g.seed != "7" || g.duration != 12*time.Second || g.bots != 5 || g.rate != 9 || g.faultKinds != "crash,webhook-5xx" || !reflect.DeepEqual(g.eng, f.eng) {
		t.Errorf("replayed flags %+v; want the report's, with --rate 9", g)
	}
	if _, err := parseKinds("crash,webhook-hang"); err == nil || !strings.Contains(err.Error(), "webhook-hang") {
		t.Errorf("--faults with a kind chaos cannot carry out: %v", err)
	}
}

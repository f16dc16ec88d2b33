package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// fuzzBytes hands out values from the fuzzer's bytes; when they run out it
// hands out zeros, so every input decodes to some run.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) u8() uint8 {
	if len(f.b) == 0 {
		return 0
	}
	v := f.b[0]
	f.b = f.b[1:]
	return v
}

func (f *fuzzBytes) u64() uint64 {
	var v uint64
	for i := 0; i < 8; i++ {
		v = v<<8 | uint64(f.u8())
	}
	return v
}

// intn is in [0, n).
func (f *fuzzBytes) intn(n int) int { return int(f.u64() % uint64(n)) }

// dur is mostly a plausible duration, sometimes an extreme one: the
// simulator must refuse or survive those, never panic or spin.
func (f *fuzzBytes) dur(typical time.Duration) time.Duration {
	switch f.u8() % 16 {
	case 0:
		return 0
	case 1:
		return -time.Duration(f.u64() >> 1)
	case 2:
		return time.Duration(f.u64() >> 1)
	case 3:
		return math.MaxInt64
	default:
		return time.Duration(f.u64() % uint64(typical+1))
	}
}

// signedDur is the difference of two draws (in that order), so an offset
// can fall on either side of zero.
func (f *fuzzBytes) signedDur(typical time.Duration) time.Duration {
	a := f.dur(typical)
	return a - f.dur(typical)
}

func (f *fuzzBytes) rate() float64 {
	switch f.u8() % 16 {
	case 0:
		return math.NaN()
	case 1:
		return -1
	case 2:
		return 2
	default:
		return float64(f.u8()) / 255 / 4
	}
}

// fuzzRun decodes a whole run: topology and workload (a drawn one, then
// rewritten), a fault plan, a fault schedule and engine settings.
func fuzzRun(seed uint64, data []byte) Config {
	f := &fuzzBytes{b: data}
	w := DrawWorkload(seed)
	if f.u8()%2 == 0 {
		w.Nodes = 1 + f.intn(8)
		if f.u8()%8 == 0 {
			w.Nodes = f.intn(12) - 1
		}
		w.Produce = f.dur(3 * time.Hour)
		w.FaultWindow = w.Produce + f.dur(time.Hour)
		w.Liveness = f.dur(2 * time.Hour)
		w.BatchMax = f.intn(40) - 1
		w.MaxAttempts = f.intn(8)
		w.RetentionTTL = f.dur(24 * time.Hour)
		w.RetentionMax = f.intn(60)
		w.CursorWriteMax = f.dur(10 * time.Second)
		w.RestartMin = f.dur(time.Minute)
		w.RestartMax = w.RestartMin + f.dur(5*time.Minute)
		w.ReceiverWindow = f.dur(3 * time.Hour)
		w.ReceiverEntries = f.intn(200)
		w.RequeueDead = f.u8()%2 == 0
		w.Lease = f.dur(10 * time.Minute)
		w.WebhookTimeout = f.dur(2 * time.Minute)
		w.CleanupInterval = f.dur(30 * time.Minute)
		w.CursorMode = engine.CursorMode(f.intn(2))
		w.HandOff = engine.HandOff(f.intn(2))
		for i := range w.Streams {
			w.Streams[i].Events = f.intn(300)
			w.Streams[i].SealEvery = f.dur(3 * time.Minute)
			w.Streams[i].LatencyMin = f.dur(time.Second)
			w.Streams[i].LatencyMax = w.Streams[i].LatencyMin + f.dur(3*time.Second)
		}
		for i := range w.Bots {
			w.Bots[i].LatencyMin = f.dur(time.Second)
			w.Bots[i].LatencyMax = w.Bots[i].LatencyMin + f.dur(3*time.Second)
		}
	}
	// A smaller budget than the default keeps each input to seconds: the
	// fuzzer's coordinator counts a slow input as a hang.
	cfg := Config{Seed: seed, Workload: &w, MaxSteps: 50_000}
	switch f.u8() % 3 {
	case 0: // the seed's own plan
	case 1:
		p := faults.None()
		for _, k := range faults.All() {
			if f.u8()%3 == 0 {
				p.Faults[k] = faults.Params{Rate: f.rate(), Max: f.dur(time.Hour)}
			}
		}
		cfg.Plan = &p
	case 2:
		p := faults.None()
		cfg.Plan = &p
	}
	kinds := faults.All()
	for i, n := 0, f.intn(6); i < n; i++ {
		k := kinds[f.intn(len(kinds))]
		sf := Fault{Kind: k, At: f.dur(2 * time.Hour), Until: f.dur(3 * time.Hour),
			Node: fmt.Sprintf("node-%d", 1+f.intn(2)), Attempt: f.intn(4), Call: f.intn(3),
			Incarnation: f.intn(3), Delay: f.dur(time.Minute), RestartAfter: f.dur(time.Minute),
			Offset: f.signedDur(time.Hour), PPM: int64(f.u64()>>1)%2_000_000 - 1_000_000,
			Member: f.u8()%2 == 0, Never: f.u8()%4 == 0, Status: 500 + f.intn(100)}
		if len(w.Bots) > 0 {
			sf.Bot = w.Bots[f.intn(len(w.Bots))].ID
		}
		if len(w.Streams) > 0 {
			sf.Stream = w.Streams[f.intn(len(w.Streams))].Name
		}
		sf.Method = []string{"Enqueue", "Claim", "Ack", "PutCursor", "GetCursor", "ListMessages", "Nack"}[f.intn(7)]
		if f.u8()%2 == 0 {
			sf.Until = 0
		}
		cfg.Schedule = append(cfg.Schedule, sf)
	}
	if f.u8()%2 == 0 {
		ib, mb, to, lease := f.dur(time.Minute), f.dur(time.Hour), f.dur(time.Minute), f.dur(5*time.Minute)
		mult, jit, inflight := float64(f.u8())/16, float64(f.u8())/255, f.intn(20)
		cfg.Engine = func(c *engine.Config) {
			c.InitialBackoff, c.MaxBackoff, c.WebhookTimeout, c.Lease = ib, mb, to, lease
			c.Multiplier, c.JitterFraction, c.MaxInFlightPerBot = mult, jit, inflight
		}
	}
	return cfg
}

// FuzzWholeRun draws whole runs and executes them with a step budget: a
// run may be refused (a clear error), end, or report that it hit its
// budget; it must never panic or hang.
//
//	go test ./sim -run '^$' -fuzz FuzzWholeRun -parallel 1 -fuzztime 10m
func FuzzWholeRun(f *testing.F) {
	f.Add(uint64(1), []byte{})
	f.Add(uint64(4844), []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 7})
	f.Add(uint64(7), []byte("\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x04"))
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		cfg := fuzzRun(seed, data)
		type out struct {
			r   *Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			r, err := Run(cfg)
			done <- out{r, err}
		}()
		var o out
		select {
		case o = <-done:
		case <-time.After(5 * time.Minute):
			// A fail-safe, not a timing assertion: the step budget bounds
			// the event loop, so only a spin inside one step gets here.
			t.Fatalf("seed %d: the run neither finished nor hit its step budget in 5 minutes of wall time", seed)
		}
		if o.err != nil {
			var be *BudgetError
			if errors.As(o.err, &be) && be.Steps < cfg.MaxSteps {
				t.Fatalf("budget error before the budget: %v", o.err)
			}
			return
		}
		if o.r.End.Before(Epoch) || o.r.End.After(o.r.HealAt.Add(o.r.Workload.Liveness+10*time.Minute)) {
			t.Fatalf("seed %d: the run ended at %v, outside [epoch, deadline]", seed, o.r.End)
		}
	})
}

// The step budget stops a run deterministically, and says so.
func TestStepBudgetStopsTheRun(t *testing.T) {
	_, err := Run(Config{Seed: 1, MaxSteps: 50})
	var be *BudgetError
	if !errors.As(err, &be) || be.Steps != 50 {
		t.Fatalf("err = %v; want a BudgetError at 50 steps", err)
	}
	_, err2 := Run(Config{Seed: 1, MaxSteps: 50})
	if err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("the budget stopped the run differently twice: %v / %v", err, err2)
	}
	if _, err := Run(Config{Seed: 1}); err != nil {
		t.Fatalf("the default budget stops an ordinary run: %v", err)
	}
}

// Inputs FuzzWholeRun found where a long store outage made the engine's
// work grow with the outage times the messages, not with the outage alone:
// 919e67d1 (Claim fails from 24 min to the heal, 2 h later): every failed
// claim re-added its own retry, 489,385 trace records for 130 events, out
// of the fuzz budget; 0b20b1d1 (Ack fails for 78 min): every store retry
// called Ack once per pending ack, 584,435 records and 14 s for 105
// events, which the fuzzer took for a hang. The bound on records is a
// bound on work, deterministic (both now take under 35,000).
func TestStoreOutageInputsStayCheap(t *testing.T) {
	for _, in := range []string{"919e67d1113580ca", "0b20b1d1c75296f0"} {
		seed, data := readFuzzInput(t, "testdata/fuzz/FuzzWholeRun/"+in)
		r, err := Run(fuzzRun(seed, data))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if len(r.Violations) > 0 {
			t.Fatalf("%s: violations: %v", in, r.Violations)
		}
		if len(r.Trace) > 100_000 {
			t.Errorf("%s: %d trace records", in, len(r.Trace))
		}
	}
}

// readFuzzInput decodes a corpus file of FuzzWholeRun (uint64, []byte).
func readFuzzInput(t *testing.T, path string) (uint64, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a two-value corpus file", path)
	}
	seed, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(lines[1], "uint64("), ")"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[2], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	return seed, []byte(s)
}

package sim

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/model/oracle"
)

func mustRun(t testing.TB, cfg Config) *Result {
	t.Helper()
	r, err := Run(cfg)
	if err != nil {
		t.Fatalf("seed %d: %v", cfg.Seed, err)
	}
	return r
}

func TestSameSeedSameTraceBytes(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42} {
		a := mustRun(t, Config{Seed: seed})
		b := mustRun(t, Config{Seed: seed})
		if !bytes.Equal(a.TraceText(), b.TraceText()) {
			t.Fatalf("seed %d: two runs gave different traces", seed)
		}
		if a.TraceHash != b.TraceHash || a.TraceHash != HashTrace(a.Trace) || len(a.TraceHash) != 64 {
			t.Fatalf("seed %d: hashes %s / %s", seed, a.TraceHash, b.TraceHash)
		}
		if len(a.Trace) < 50 {
			t.Fatalf("seed %d: suspiciously short trace (%d lines)", seed, len(a.Trace))
		}
	}
}

// The simulator must not depend on scheduling: run one seed under different
// GOMAXPROCS and concurrently with itself; every trace must be identical.
func TestTraceIndependentOfGOMAXPROCSAndConcurrency(t *testing.T) {
	const seed = 13
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	want := mustRun(t, Config{Seed: seed}).TraceHash
	for _, procs := range []int{2, 4} {
		runtime.GOMAXPROCS(procs)
		hashes := make([]string, 4)
		var wg sync.WaitGroup
		for i := range hashes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := Run(Config{Seed: seed})
				if err == nil {
					hashes[i] = r.TraceHash
				}
			}()
		}
		wg.Wait()
		for i, h := range hashes {
			if h != want {
				t.Fatalf("GOMAXPROCS=%d run %d: hash %s, want %s", procs, i, h, want)
			}
		}
	}
}

func TestDifferentSeedsDifferentTraces(t *testing.T) {
	seen := map[string]uint64{}
	for seed := uint64(100); seed < 120; seed++ {
		h := mustRun(t, Config{Seed: seed}).TraceHash
		if prev, dup := seen[h]; dup {
			t.Fatalf("seeds %d and %d have the same trace hash", prev, seed)
		}
		seen[h] = seed
	}
}

// A sweep must actually exercise the faults it claims to, and the reference
// engine must come through it clean.
func TestSweepExercisesFaultsWithoutViolations(t *testing.T) {
	total := map[faults.Kind]int{}
	var c Counters
	var direct, queued, sentDirect, directFailuresQueued, leased int
	for seed := uint64(1); seed <= 60; seed++ {
		r := mustRun(t, Config{Seed: seed})
		for _, v := range r.Violations {
			t.Errorf("seed %d: %v", seed, v)
		}
		// Both hand-offs must really run: direct sends (and failed ones
		// written to the queue) in direct seeds, queue rows in queued ones.
		if r.Workload.HandOff == engine.HandOffDirect {
			direct++
			sentDirect += r.Engine.SentDirect
			directFailuresQueued += r.Engine.Enqueued
		} else {
			queued++
			leased += r.Engine.Enqueued
			if r.Engine.SentDirect != 0 {
				t.Errorf("seed %d: queued hand-off sent %d messages directly", seed, r.Engine.SentDirect)
			}
		}
		for k, n := range r.Faults {
			total[k] += n
		}
		c.Crashes += r.Counters.Crashes
		c.Duplicates += r.Counters.Duplicates
		c.DeadLetters += r.Counters.DeadLetters
		c.RetentionDrops += r.Counters.RetentionDrops
		c.Deliveries += r.Counters.Deliveries
	}
	for _, k := range faults.All() {
		if total[k] == 0 {
			t.Errorf("no %s fault was injected in 60 seeds", k)
		}
	}
	if c.Crashes == 0 || c.Duplicates == 0 || c.DeadLetters == 0 || c.RetentionDrops == 0 || c.Deliveries == 0 {
		t.Errorf("sweep counters too thin to mean anything: %+v", c)
	}
	if total[faults.WebhookTimeout] == 0 || total[faults.ClockOffset]+total[faults.ClockDrift] == 0 {
		t.Errorf("no webhook timeouts or no clock skew: %v", total)
	}
	if direct < 10 || queued < 10 || sentDirect == 0 || directFailuresQueued == 0 || leased == 0 {
		t.Errorf("hand-offs too thin: %d direct seeds (%d direct sends, %d rows of failed ones), %d queued seeds (%d rows)",
			direct, sentDirect, directFailuresQueued, queued, leased)
	}
}

// Each known-bug variant of the seeds must be caught, by the invariant its
// bug breaks, within a few seeds.
func TestKnownBugsAreCaught(t *testing.T) {
	for _, tc := range []struct {
		name string
		bugs engine.Bugs
		inv  string
	}{
		{"fresh-sync-on-boot", engine.Bugs{FreshSyncOnBoot: true}, oracle.InvNoSilentLoss},
		{"delete-before-send", engine.Bugs{DeleteBeforeSend: true}, oracle.InvNoSilentLoss},
		{"no-requeue-on-failure", engine.Bugs{NoRequeueOnFailure: true}, oracle.InvNoSilentLoss},
		{"no-retention", engine.Bugs{NoRetention: true}, oracle.InvRetentionBounds},
		{"unguarded-cursor-writes", engine.Bugs{UnguardedCursorWrites: true}, oracle.InvCursorMonotonic},
		{"timestamp-only-cursor", engine.Bugs{TimestampOnlyCursor: true}, oracle.InvNoSilentLoss},
		{"no-receiver-dedup", engine.Bugs{NoReceiverDedup: true}, oracle.InvIdempotentReplay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 40; seed++ {
				for _, v := range mustRun(t, Config{Seed: seed, Bugs: tc.bugs}).Violations {
					if v.Invariant == tc.inv {
						return
					}
				}
			}
			t.Fatalf("no %s violation in 40 seeds with the %s bug", tc.inv, tc.name)
		})
	}
}

func TestNoFaultsAfterHeal(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		r := mustRun(t, Config{Seed: seed})
		for _, rec := range r.Trace {
			if rec.Kind == "fault" && rec.Time.After(r.HealAt) {
				t.Fatalf("seed %d: fault after the heal at %s: %s", seed, r.HealAt, rec)
			}
		}
		if !r.Quiescent {
			t.Errorf("seed %d did not quiesce after the heal", seed)
		}
	}
}

func TestExplicitPlanWithoutFaults(t *testing.T) {
	none := faults.None()
	r := mustRun(t, Config{Seed: 5, Plan: &none})
	for k, n := range r.Faults {
		if n != 0 {
			t.Errorf("plan none injected %d %s faults", n, k)
		}
	}
	if r.Counters.Crashes != 0 || len(r.Violations) != 0 {
		t.Fatalf("fault-free run: crashes %d, violations %v", r.Counters.Crashes, r.Violations)
	}
	if r.Counters.Deliveries != r.Counters.Obligations || r.Counters.Obligations == 0 {
		t.Fatalf("fault-free run delivered %d of %d obligations", r.Counters.Deliveries, r.Counters.Obligations)
	}
}

func TestExplicitPlanIsHonoured(t *testing.T) {
	p := faults.None().With(faults.Crash, faults.Params{Rate: 0.05})
	r := mustRun(t, Config{Seed: 5, Plan: &p})
	if r.Faults[faults.Crash] == 0 || r.Counters.Crashes < r.Faults[faults.Crash] {
		t.Fatalf("crash plan: %d crash faults, %d crashes", r.Faults[faults.Crash], r.Counters.Crashes)
	}
	for k, n := range r.Faults {
		if k != faults.Crash && n != 0 {
			t.Errorf("plan with only crashes injected %d %s", n, k)
		}
	}
	if len(r.Violations) != 0 {
		t.Fatalf("violations: %v", r.Violations)
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	w := DrawWorkload(1)
	w.Nodes = 0
	if _, err := Run(Config{Seed: 1, Workload: &w}); err == nil || !strings.Contains(err.Error(), "Nodes") {
		t.Fatalf("Nodes=0 accepted: %v", err)
	}
	bad := faults.None().With(faults.Crash, faults.Params{Rate: 3})
	if _, err := Run(Config{Seed: 1, Plan: &bad}); err == nil {
		t.Fatal("a rate of 3 was accepted")
	}
	if _, err := Run(Config{Seed: 1, Engine: func(c *engine.Config) { c.MaxAttempts = 0 }}); err == nil {
		t.Fatal("an invalid engine config was accepted")
	}
}

func TestNodeClockRoundTrips(t *testing.T) {
	s := &sim{now: Epoch.Add(time.Hour)}
	for _, tc := range []struct {
		off time.Duration
		ppm int64
	}{{0, 0}, {90 * time.Second, 0}, {-2 * time.Minute, 1389}, {30 * time.Second, -1389}} {
		n := &node{s: s, offset: tc.off, ppm: tc.ppm, bootAt: Epoch.Add(10 * time.Minute)}
		for _, d := range []time.Duration{0, time.Millisecond, 17 * time.Minute, 3 * time.Hour} {
			want := Epoch.Add(time.Hour + d)
			v := n.virtualTime(want)
			if n.engineTime(v).Before(want) || !n.engineTime(v.Add(-1)).Before(want) {
				t.Fatalf("offset %v ppm %d: virtualTime(%v) = %v is not the first instant the clock reads it", tc.off, tc.ppm, want, v)
			}
		}
	}
}

func TestRecordFormatting(t *testing.T) {
	r := Record{Step: 12, Time: Epoch.Add(90*time.Second + 5), Actor: "node-1", Kind: "send",
		Fields: kv("bot", "bot-1", "detail", "two words", "empty", "", "n", 3)}
	want := `0000012 90.000000005 node-1 send bot=bot-1 detail="two words" empty="" n=3`
	if got := r.String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(FormatTrace([]Record{r, r})); got != want+"\n"+want+"\n" {
		t.Fatalf("FormatTrace = %q", got)
	}
}

func TestWorkloadDrawIsBoundedAndValid(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		w := DrawWorkload(seed)
		if err := w.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		events := 0
		for _, s := range w.Streams {
			events += s.Events
		}
		if len(w.Streams) >= WideStreams {
			// drawWide: 130-160 log streams and up to ten timestamp
			// streams of one event each, 20-40 bots.
			if len(w.Streams) > 170 || len(w.Bots) > 40 || events != len(w.Streams) || w.Produce > 2*time.Hour {
				t.Fatalf("seed %d drew an oversized wide world: %d streams, %d bots, %d events, %v", seed, len(w.Streams), len(w.Bots), events, w.Produce)
			}
			continue
		}
		if w.BatchMax >= LongPage-1 {
			// drawLong: one stream of 999-1301 events in one instant, for
			// one bot.
			n := len(w.Streams[0].Explicit)
			if len(w.Streams) != 1 || len(w.Bots) != 1 || n < LongPage-1 || n > LongPage+301 || w.Produce > 2*time.Hour {
				t.Fatalf("seed %d drew an oversized long world: %d streams, %d bots, %d events, %v", seed, len(w.Streams), len(w.Bots), n, w.Produce)
			}
			continue
		}
		if len(w.Streams) > 4 || len(w.Bots) > 5 || events < 20 || events > 200 || w.Produce > 2*time.Hour {
			t.Fatalf("seed %d drew an oversized world: %d streams, %d bots, %d events, %v", seed, len(w.Streams), len(w.Bots), events, w.Produce)
		}
	}
	a, b := fmt.Sprint(DrawWorkload(3)), fmt.Sprint(DrawWorkload(3))
	if a != b {
		t.Fatal("DrawWorkload is not deterministic")
	}
}

// A backend without impl.LeasingEnqueuer (here memstore with the method
// hidden) must look so to the engine through the simulator's wrappers: a
// direct seed then hands off queued, with no store errors.
func TestBackendWithoutLeasedEnqueue(t *testing.T) {
	none := faults.None()
	w := DrawWorkload(5)
	w.HandOff = engine.HandOffDirect
	r := mustRun(t, Config{Seed: 5, Plan: &none, Workload: &w, Store: func() (impl.Store, error) {
		return struct{ impl.Store }{memstore.New()}, nil
	}})
	if r.Engine.StoreErrors != 0 || r.Engine.SentDirect != 0 || len(r.Violations) != 0 {
		t.Fatalf("store errors %d, direct sends %d, violations %v", r.Engine.StoreErrors, r.Engine.SentDirect, r.Violations)
	}
	if r.Engine.Enqueued == 0 || r.Counters.Deliveries != r.Counters.Obligations {
		t.Fatalf("queued hand-off: enqueued %d, delivered %d of %d", r.Engine.Enqueued, r.Counters.Deliveries, r.Counters.Obligations)
	}
}

// A node whose CrashHook chose a crash point is dead: a store call it makes
// after the point (mutant streams.go:329:22 advanced its joins past a
// crash, seed 8) stops the run instead of being judged as a live write.
func TestStoreCallAfterCrashPointIsFatal(t *testing.T) {
	for _, chosen := range []bool{false, true} {
		s := newSim(Config{Seed: 1}, DrawWorkload(1), faults.Draw(1), memstore.New())
		s.setup()
		n := s.nodes[0]
		n.crashChosen = chosen
		storeFaults{n}.Before("Ack")
		if got := s.fatal != nil && strings.Contains(s.fatal.Error(), "after its CrashHook chose a crash point"); got != chosen {
			t.Errorf("crash point chosen %v: fatal %v", chosen, s.fatal)
		}
	}
}

// engine.Send.Attempt is 1-based: a send numbered below 1 (mutant
// queue.go:253:24 numbered the first attempt -1) stops the run.
func TestSendNumberedBelowOneIsFatal(t *testing.T) {
	for _, plant := range []bool{false, true} {
		cfg := Config{Seed: 1, TraceHashOnly: true}
		if plant {
			cfg.Wire = func(sd *engine.Send) { sd.Attempt-- }
		}
		_, err := Run(cfg)
		if got := err != nil && strings.Contains(err.Error(), "engine.Send.Attempt is 1-based"); got != plant {
			t.Errorf("attempt lowered %v: err %v", plant, err)
		}
	}
}

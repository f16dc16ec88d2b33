package sim

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// drawWorkload draws a whole world with rapid generators, so a failing
// simulation shrinks to fewer streams, bots, events and faults.
func drawWorkload(t *rapid.T) Workload {
	minutes := func(lo, hi int, label string) time.Duration {
		return time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * time.Minute
	}
	w := Workload{
		Nodes:           rapid.IntRange(1, 2).Draw(t, "nodes"),
		Produce:         minutes(5, 90, "produce_min"),
		Liveness:        30 * time.Minute,
		HOLBound:        2 * time.Minute,
		BatchMax:        rapid.IntRange(1, 16).Draw(t, "batch_max"),
		MaxAttempts:     rapid.IntRange(1, 5).Draw(t, "max_attempts"),
		RetentionTTL:    rapid.SampledFrom([]time.Duration{7 * 24 * time.Hour, 15 * time.Minute, time.Hour}).Draw(t, "ttl"),
		RetentionMax:    rapid.SampledFrom([]int{1000, 5, 30}).Draw(t, "cap"),
		CursorWriteMax:  time.Duration(rapid.IntRange(0, 5000).Draw(t, "cursor_write_ms")) * time.Millisecond,
		RestartMin:      time.Second,
		RestartMax:      time.Duration(rapid.IntRange(1, 180).Draw(t, "restart_max_s")) * time.Second,
		ReceiverWindow:  rapid.SampledFrom([]time.Duration{24 * time.Hour, 20 * time.Minute}).Draw(t, "dedup_window"),
		ReceiverEntries: rapid.SampledFrom([]int{10000, 30}).Draw(t, "dedup_entries"),
	}
	w.FaultWindow = w.Produce + minutes(0, 30, "heal_after_min")
	w.RequeueDead = rapid.Bool().Draw(t, "requeue_dead")
	if rapid.Bool().Draw(t, "async_cursor") {
		w.CursorMode = engine.CursorAsync
	}
	for i := range rapid.IntRange(1, 3).Draw(t, "streams") {
		s := StreamSpec{
			Name:       fmt.Sprintf("stream-%d", i+1),
			Events:     rapid.IntRange(0, 40).Draw(t, "events"),
			LatencyMin: time.Duration(rapid.IntRange(1, 200).Draw(t, "up_latency_ms")) * time.Millisecond,
		}
		s.LatencyMax = s.LatencyMin + time.Duration(rapid.IntRange(0, 2000).Draw(t, "up_jitter_ms"))*time.Millisecond
		if rapid.Bool().Draw(t, "timestamp_stream") {
			s.Kind = engine.TimestampStream
			for range rapid.IntRange(1, 3).Draw(t, "producers") {
				s.ProducerSkews = append(s.ProducerSkews, time.Duration(rapid.IntRange(-120, 120).Draw(t, "skew_s"))*time.Second)
			}
		} else {
			s.Kind = engine.LogStream
			s.SealEvery = time.Duration(rapid.IntRange(1, 120).Draw(t, "seal_s")) * time.Second
		}
		w.Streams = append(w.Streams, s)
	}
	for i := range rapid.IntRange(1, 4).Draw(t, "bots") {
		b := BotSpec{
			ID:         fmt.Sprintf("bot-%d", i+1),
			Secret:     rapid.SliceOfN(rapid.Byte(), 8, 32).Draw(t, "secret"),
			LatencyMin: time.Duration(rapid.IntRange(1, 100).Draw(t, "bot_latency_ms")) * time.Millisecond,
		}
		b.LatencyMax = b.LatencyMin + time.Duration(rapid.IntRange(0, 700).Draw(t, "bot_jitter_ms"))*time.Millisecond
		w.Bots = append(w.Bots, b)
	}
	for _, s := range w.Streams {
		for _, b := range w.Bots {
			if rapid.Bool().Draw(t, "member") {
				w.Members = append(w.Members, MemberSpec{Stream: s.Name, Bot: b.ID})
			}
		}
	}
	return w
}

// drawPlan enables each fault kind or not, with a rate and size in the
// ranges faults.Draw uses.
func drawPlan(t *rapid.T) faults.Plan {
	p := faults.None()
	maxRate := map[faults.Kind]float64{
		faults.Crash: 0.006, faults.StoreError: 0.04, faults.StoreAmbiguous: 0.04,
		faults.CrashAfterStoreWrite: 0.03, faults.CrashAfterSend: 0.03, faults.CrashAfterProcess: 0.03,
	}
	for _, k := range faults.All() {
		if !rapid.Bool().Draw(t, "on:"+string(k)) {
			continue
		}
		hi := maxRate[k]
		if hi == 0 {
			hi = 0.4
		}
		p.Faults[k] = faults.Params{
			Rate: rapid.Float64Range(0, hi).Draw(t, "rate:"+string(k)),
			Max:  time.Duration(rapid.IntRange(1, 600).Draw(t, "max_s:"+string(k))) * time.Second,
		}
	}
	if p.Enabled(faults.ClockOffset) {
		p.Faults[faults.ClockOffset] = faults.Params{Max: min(p.Faults[faults.ClockOffset].Max, 2*time.Minute)}
	}
	if p.Enabled(faults.ClockDrift) {
		p.Faults[faults.ClockDrift] = faults.Params{Max: min(p.Faults[faults.ClockDrift].Max, 5*time.Second)}
	}
	return p
}

// TestPropertyNoViolations: any world, any plan, the reference engine keeps
// every invariant. On failure rapid shrinks the world and prints the
// smallest one it found.
func TestPropertyNoViolations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := drawWorkload(t)
		p := drawPlan(t)
		seed := rapid.Uint64().Draw(t, "seed")
		r, err := Run(Config{Seed: seed, Workload: &w, Plan: &p})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		for _, v := range r.Violations {
			t.Errorf("%v", v)
		}
		if len(r.Violations) > 0 {
			t.Fatalf("plan %s: %d violations", p, len(r.Violations))
		}
	})
}

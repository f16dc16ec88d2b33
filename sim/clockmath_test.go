package sim

import (
	"math"
	"testing"
	"time"
)

func TestScalePPMMatchesPlainArithmeticAndSaturates(t *testing.T) {
	for _, d := range []time.Duration{0, 1, -1, 999_999, time.Hour, -17 * time.Minute, 3 * time.Hour} {
		for _, ppm := range []int64{0, 1, -1, 1389, -1389, 500_000, -500_000} {
			if got, want := scalePPM(d, ppm), time.Duration(int64(d)*ppm/1_000_000); got != want {
				t.Fatalf("scalePPM(%v, %d) = %v, want %v", d, ppm, got, want)
			}
		}
	}
	// Where the plain product wraps (72h * 500000 does), the exact value.
	if got := scalePPM(72*time.Hour, 500_000); got != 36*time.Hour {
		t.Fatalf("scalePPM(72h, 500000) = %v, want 36h", got)
	}
	if got := scalePPM(math.MaxInt64, 2_000_000); got != math.MaxInt64 {
		t.Fatalf("overflow did not saturate up: %v", got)
	}
	if got := scalePPM(math.MaxInt64, -2_000_000); got != math.MinInt64 {
		t.Fatalf("overflow did not saturate down: %v", got)
	}
}

// Issue 11 defect 2: a clock that nearly stands still (or, unbounded, one
// far from its boot) made virtualTime step one nanosecond at a time for
// ever. The search is now bounded whatever the drift.
func TestVirtualTimeAtExtremeDrift(t *testing.T) {
	s := &sim{now: Epoch}
	for _, ppm := range []int64{-999_999, -983_333, -500_000, 500_000, 10_000_000_000} {
		for _, off := range []time.Duration{0, -24 * time.Hour, 24 * time.Hour} {
			n := &node{s: s, offset: off, ppm: ppm, bootAt: Epoch}
			for _, d := range []time.Duration{time.Minute, 100 * 24 * time.Hour, math.MaxInt64 / 2} {
				want := Epoch.Add(d)
				v := n.virtualTime(want)
				// At the int64 ends the answer is "never" or "always" and
				// the clock reading itself saturates.
				if el := v.Sub(n.bootAt); el == math.MaxInt64 || el == math.MinInt64 {
					continue
				}
				if n.engineTime(v).Before(want) || (ppm < 1_000_000 && !n.engineTime(v.Add(-1)).Before(want)) {
					t.Fatalf("ppm %d offset %v: virtualTime(+%v) = %v reads %v, before the target", ppm, off, d, v, n.engineTime(v))
				}
			}
		}
	}
}

// The fuzzer's input 04ffc489 drew a latency range whose width overflowed
// int64 and panicked Int64N; between now draws from any range lo <= hi.
func TestBetweenAnyRange(t *testing.T) {
	r := actorRand(1, "t")
	for _, c := range [][2]time.Duration{{math.MinInt64, math.MaxInt64}, {-1 << 62, 1 << 62}, {0, math.MaxInt64}, {5, 5}, {1, 3}} {
		if v := between(r, c[0], c[1]); v < c[0] || v > c[1] {
			t.Fatalf("between(%v, %v) = %v", c[0], c[1], v)
		}
	}
	// Spans that fit draw what they always drew.
	a, b := actorRand(7, "x"), actorRand(7, "x")
	for i := 0; i < 100; i++ {
		if got, want := between(a, time.Second, time.Minute), time.Second+time.Duration(b.Int64N(int64(time.Minute-time.Second)+1)); got != want {
			t.Fatalf("draw %d: %v, want %v", i, got, want)
		}
	}
}

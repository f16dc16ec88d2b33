package chaos

import (
	"context"
	"strings"
	"testing"
	"time"
)

// fakeWait is a progressWait on a clock that each sleep moves forward.
func fakeWait(quiet, ceiling time.Duration) (*progressWait, *time.Time) {
	now := time.Unix(1_000_000, 0)
	w := &progressWait{ctx: context.Background(), quiet: quiet, ceiling: now.Add(ceiling),
		now: func() time.Time { return now }, sleep: func(_ context.Context, d time.Duration) { now = now.Add(d) }}
	return w, &now
}

// A step whose measure keeps moving is waited for however long it takes:
// the machine's speed is not a verdict (the reference at double load
// handled 524 of 600 events in the old fixed 5 s).
func TestSmokeWaitsWhileProgressIsMade(t *testing.T) {
	w, now := fakeWait(5*time.Second, time.Hour)
	start, n := *now, 0
	ok := w.until(func() (int, bool) {
		if now.Sub(start) >= time.Duration(n+1)*4*time.Second {
			n++ // one more event every 4 s: slow, never quiet for 5 s
		}
		return n, n == 600
	})
	if !ok || n != 600 {
		t.Fatalf("until gave up at %d of 600 after %s (%s); a measure that moves every 4 s must be waited for", n, now.Sub(start), w.why())
	}
}

// A measure that stops moving fails the step the quiet period after its
// last move, and says so.
func TestSmokeFailsWhenProgressStops(t *testing.T) {
	w, now := fakeWait(5*time.Second, time.Hour)
	start, n := *now, 0
	ok := w.until(func() (int, bool) {
		n = min(500, int(now.Sub(start)/(10*time.Millisecond))) // 500 events, then nothing (an engine that never pages)
		return n, n == 600
	})
	stoppedAt := 500 * 10 * time.Millisecond
	if ok || n != 500 {
		t.Fatalf("until returned %v at %d; want a failure at 500", ok, n)
	}
	if took := now.Sub(start); took < stoppedAt+5*time.Second || took > stoppedAt+5*time.Second+2*smokePoll {
		t.Errorf("the step failed %s after it began; want the quiet period 5s after the last progress at %s", took, stoppedAt)
	}
	if !strings.Contains(w.why(), "no progress for 5s") {
		t.Errorf("why %q does not name the quiet period", w.why())
	}
}

// The ceiling ends a wait that is still progressing.
func TestSmokeCeilingEndsATrickle(t *testing.T) {
	w, now := fakeWait(5*time.Second, time.Minute)
	start, n := *now, 0
	ok := w.until(func() (int, bool) {
		n = int(now.Sub(start) / time.Second) // one event a second, for ever
		return n, false
	})
	if ok || !strings.Contains(w.why(), "ceiling") || now.Sub(start) < time.Minute {
		t.Errorf("until = %v after %s (%s); want the ceiling after 1m", ok, now.Sub(start), w.why())
	}
}

package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliverysim/deliverysim/impl"
)

// The retry loop is tested without a server: try is a planted store call
// that fails as told, and the waits are counted instead of slept, so no
// assertion depends on how fast the machine is.

func raceLost(code string) error {
	return fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: "planted"})
}

// noWait stands for sleep: it records the pauses and sleeps none, unless
// ctx has ended.
type noWait struct{ pauses []time.Duration }

func (w *noWait) wait(ctx context.Context, d time.Duration) bool {
	w.pauses = append(w.pauses, d)
	return ctx.Err() == nil
}

// A serialization failure or a deadlock is retried past any count (the old
// budget was 30 tries): the call succeeds once the race is won.
func TestRetryLostRacesUntilTheyPass(t *testing.T) {
	for _, code := range []string{pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected} {
		tries := 0
		var w noWait
		err := retry(context.Background(), func() error {
			if tries++; tries <= 200 {
				return raceLost(code)
			}
			return nil
		}, w.wait)
		if err != nil || tries != 201 {
			t.Fatalf("%s: got %v after %d tries, want success on try 201", code, err, tries)
		}
		if len(w.pauses) != 200 {
			t.Fatalf("%s: %d pauses for 200 failures", code, len(w.pauses))
		}
		for i, d := range w.pauses {
			if d <= 0 || d > backoffCap {
				t.Fatalf("%s: pause %d is %v, want in (0, %v]", code, i, d, backoffCap)
			}
		}
	}
}

// The context, not a count, ends a losing streak: cancelled during a try
// (or before a pause), the loop tries no more and returns the last
// failure together with the context's error.
func TestRetryStopsWhenTheContextEnds(t *testing.T) {
	for _, cancelAt := range []int{1, 7, 500} {
		ctx, cancel := context.WithCancel(context.Background())
		tries := 0
		var w noWait
		err := retry(ctx, func() error {
			if tries++; tries == cancelAt {
				cancel()
			}
			return raceLost(pgerrcode.SerializationFailure)
		}, w.wait)
		cancel()
		if tries != cancelAt {
			t.Fatalf("cancelled on try %d, but tried %d times", cancelAt, tries)
		}
		assertGaveUp(t, err, context.Canceled, pgerrcode.SerializationFailure)
	}
}

// The pause itself ends with the context: a context that ends while the
// loop sleeps (here: one that is already over, before an hour's pause)
// returns at once rather than after the pause.
func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sleep(ctx, time.Hour) {
		t.Fatal("sleep on an ended context reported it alive")
	}
	tries := 0
	err := retry(ctx, func() error { tries++; return raceLost(pgerrcode.DeadlockDetected) }, func(ctx context.Context, _ time.Duration) bool {
		return sleep(ctx, time.Hour)
	})
	if tries != 1 {
		t.Fatalf("tried %d times on an ended context", tries)
	}
	assertGaveUp(t, err, context.Canceled, pgerrcode.DeadlockDetected)
}

// Only the race codes are retried without a count: a request that never
// left (a closed pool, no connection) is retried maxNotSentTries times,
// and a definite refusal (a unique violation, a failed connect) not at
// all, even while the context lives.
func TestRetryBoundsWhatIsNotARace(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"not sent (closed pool)", notSent{errors.New("closed pool")}, maxNotSentTries},
		{"unique violation", raceLost(pgerrcode.UniqueViolation), 1},
		{"connect refused", &pgconn.ConnectError{}, 1},
		{"plain error", errors.New("boom"), 1},
	}
	for _, c := range cases {
		tries := 0
		var w noWait
		err := retry(context.Background(), func() error {
			// A loop that would not stop ends here with a success the
			// assertion below refuses, instead of hanging the test.
			if tries++; tries > 10*maxNotSentTries {
				return nil
			}
			return c.err
		}, w.wait)
		if tries != c.want || !errors.Is(err, c.err) {
			t.Errorf("%s: %d tries, error %v; want %d tries and the error itself", c.name, tries, err, c.want)
		}
	}
}

// What the caller finally gets from a lost race, through classify: the
// rollback is a definite failure (not impl.ErrAmbiguous) and the context's
// end is findable.
func TestGaveUpStaysUnambiguous(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := classify("claim", true, retry(ctx, func() error { return raceLost(pgerrcode.SerializationFailure) }, sleep))
	if errors.Is(err, impl.ErrAmbiguous) {
		t.Fatalf("a rolled-back call reported as ambiguous: %v", err)
	}
	assertGaveUp(t, err, context.Canceled, pgerrcode.SerializationFailure)
}

func assertGaveUp(t *testing.T, err, ctxErr error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.Is(err, ctxErr) || !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Fatalf("got %v; want the last failure (SQLSTATE %s) and %v", err, code, ctxErr)
	}
	var g *gaveUp
	if !errors.As(err, &g) {
		t.Fatalf("got %T %v; want a *gaveUp saying the retries stopped", err, err)
	}
}

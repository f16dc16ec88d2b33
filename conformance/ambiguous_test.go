package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
)

// flaky fails one call in five: half of those before the call reaches the
// store, half after it took effect (the ambiguous commit).
type flaky struct {
	impl.Store
	mu sync.Mutex
	r  *rand.Rand
}

var errInjected = fmt.Errorf("injected: %w", impl.ErrAmbiguous)

// around runs call unless the dice say fail-before; after it ran, the dice
// may still turn its success into an ambiguous error.
func (f *flaky) around(call func() error) error {
	f.mu.Lock()
	roll := f.r.IntN(10)
	f.mu.Unlock()
	if roll == 0 {
		return errInjected
	}
	if err := call(); err != nil {
		return err
	}
	if roll == 1 {
		return errInjected
	}
	return nil
}

func (f *flaky) GetCursor(ctx context.Context, k impl.CursorKey) (c impl.Cursor, ok bool, err error) {
	err = f.around(func() (e error) { c, ok, e = f.Store.GetCursor(ctx, k); return })
	return
}
func (f *flaky) ListCursors(ctx context.Context) (cs []impl.Cursor, err error) {
	err = f.around(func() (e error) { cs, e = f.Store.ListCursors(ctx); return })
	return
}
func (f *flaky) AdvanceCursors(ctx context.Context, in []impl.Cursor) (w []bool, err error) {
	err = f.around(func() (e error) { w, e = f.Store.AdvanceCursors(ctx, in); return })
	return
}
func (f *flaky) Enqueue(ctx context.Context, msgs []impl.Message) (n int, err error) {
	err = f.around(func() (e error) { n, e = f.Store.Enqueue(ctx, msgs); return })
	return
}
func (f *flaky) Claim(ctx context.Context, req impl.ClaimRequest) (ms []impl.Message, err error) {
	err = f.around(func() (e error) { ms, e = f.Store.Claim(ctx, req); return })
	return
}
func (f *flaky) Ack(ctx context.Context, keys []impl.MessageKey) (n int, err error) {
	err = f.around(func() (e error) { n, e = f.Store.Ack(ctx, keys); return })
	return
}
func (f *flaky) Fail(ctx context.Context, req impl.FailRequest) (m impl.Message, ok bool, err error) {
	err = f.around(func() (e error) { m, ok, e = f.Store.Fail(ctx, req); return })
	return
}
func (f *flaky) Requeue(ctx context.Context, k impl.MessageKey, now time.Time) (ok bool, err error) {
	err = f.around(func() (e error) { ok, e = f.Store.Requeue(ctx, k, now); return })
	return
}
func (f *flaky) ListMessages(ctx context.Context, sub string) (ms []impl.Message, err error) {
	err = f.around(func() (e error) { ms, e = f.Store.ListMessages(ctx, sub); return })
	return
}
func (f *flaky) DeleteExpired(ctx context.Context, cutoff, now time.Time) (n int, err error) {
	err = f.around(func() (e error) { n, e = f.Store.DeleteExpired(ctx, cutoff, now); return })
	return
}
func (f *flaky) TrimPerSubscriber(ctx context.Context, max int, now time.Time) (n int, err error) {
	err = f.around(func() (e error) { n, e = f.Store.TrimPerSubscriber(ctx, max, now); return })
	return
}
func (f *flaky) GetDelivered(ctx context.Context, app, src string) (items []impl.DeliveredItem, err error) {
	err = f.around(func() (e error) { items, e = f.Store.GetDelivered(ctx, app, src); return })
	return
}
func (f *flaky) RecordDelivered(ctx context.Context, app, src string, items []impl.DeliveredItem, deleted []string) error {
	return f.around(func() error { return f.Store.RecordDelivered(ctx, app, src, items, deleted) })
}
func (f *flaky) MarkProcessed(ctx context.Context, req impl.MarkRequest) (ok bool, err error) {
	err = f.around(func() (e error) { ok, e = f.Store.MarkProcessed(ctx, req); return })
	return
}

// WriteHandOff forwards the capability, so that hand-offs run through the
// faults too (Linearizability/HandOff, the state machine).
func (f *flaky) WriteHandOff(ctx context.Context, w impl.HandOffWrite) (res impl.HandOffResult, err error) {
	h, ok := impl.AsHandOffWriter(f.Store)
	if !ok {
		return res, errors.New("flaky: the store under it has no WriteHandOff")
	}
	err = f.around(func() (e error) { res, e = h.WriteHandOff(ctx, w); return })
	return
}

func flakyFactory(base conformance.Factory, ambiguousDeclared bool) conformance.Factory {
	var seed uint64
	var mu sync.Mutex
	return conformance.Factory{
		Name: base.Name + "+flaky",
		New: func(t testing.TB) impl.Store {
			mu.Lock()
			seed++
			s := seed
			mu.Unlock()
			return &flaky{Store: base.New(t), r: rand.New(rand.NewPCG(s, 99))}
		},
		Features: conformance.Features{Concurrent: base.Features.Concurrent, AmbiguousErrors: ambiguousDeclared, HandOff: base.Features.HandOff},
	}
}

// With AmbiguousErrors declared, a correct store behind a faulty link must
// pass: the model follows both outcomes of every failed call.
func TestAmbiguousErrorsOnACorrectStorePass(t *testing.T) {
	rep := conformance.Check(flakyFactory(memoryFactory(), true), conformance.RapidChecks(200))
	require.True(t, rep.Passed(), "%s", rep)
	for _, r := range rep.Results {
		switch r.Group {
		case conformance.GroupStateMachine:
			require.Contains(t, r.Summary, "passed 200 tests", "the state machine must really have run")
		case conformance.GroupLinearizability:
			require.Contains(t, r.Summary, "with unknown outcome")
			require.NotContains(t, r.Summary, "(0 with unknown outcome)", "the histories must contain ambiguous calls")
		}
	}
	status, _ := rep.Status("Contract/EnqueueIdempotent")
	require.Equal(t, conformance.Skip, status, "the fixed script cannot run through faults")
	for _, name := range []string{"StateMachine/Random", "Linearizability/PerKey", "Linearizability/Queue", "Linearizability/HandOff"} {
		status, _ := rep.Status(name)
		require.Equal(t, conformance.Pass, status, name)
	}
}

// Faults must not hide bugs: a planted bug behind the same faulty link is
// still caught.
func TestAmbiguousErrorsDoNotHideBugs(t *testing.T) {
	for _, bf := range conformance.BuggyBackends(memoryFactory()) {
		t.Run(bf.Name, func(t *testing.T) {
			// Only the state machine: proving a history with many
			// unknown outcomes illegal is porcupine's worst case.
			rep := conformance.Check(flakyFactory(bf, true), conformance.Only(conformance.GroupStateMachine),
				conformance.RapidChecks(1000), conformance.ShrinkTime(5*time.Second))
			status, _ := rep.Status("StateMachine/Random")
			require.Equal(t, conformance.Fail, status, "%s", rep)
		})
	}
}

// Without the feature, an error is a failure, named as such.
func TestUndeclaredErrorsFail(t *testing.T) {
	rep := conformance.Check(flakyFactory(memoryFactory(), false), conformance.Only("StateMachine", "Linearizability"), conformance.ArtifactsDir(t.TempDir()))
	require.False(t, rep.Passed())
	for _, r := range rep.Results {
		require.Equal(t, conformance.Fail, r.Status, r.Name)
		require.Contains(t, r.Message, "does not declare Features.AmbiguousErrors", r.Name)
	}
	require.True(t, errors.Is(errInjected, impl.ErrAmbiguous))
}

func TestCheckRejectsAnIncompleteFactory(t *testing.T) {
	rep := conformance.Check(conformance.Factory{Name: "no-new"})
	require.False(t, rep.Passed())
	require.Contains(t, rep.Failures()[0].Message, "needs a Name and a New function")
}

// A backend that panics fails its checks; it does not take the caller down.
func TestCheckSurvivesAPanickingBackend(t *testing.T) {
	f := conformance.Factory{Name: "panics", New: func(testing.TB) impl.Store { return panicking{} }}
	rep := conformance.Check(f, conformance.Only("Contract/CursorAbsent", "StateMachine"))
	require.Len(t, rep.Results, 2)
	for _, r := range rep.Results {
		require.Equal(t, conformance.Fail, r.Status, r.Name)
		require.Contains(t, r.Message, "panic", r.Name)
	}
}

type panicking struct{ impl.Store }

func (panicking) GetCursor(context.Context, impl.CursorKey) (impl.Cursor, bool, error) {
	panic("backend exploded")
}
func (panicking) ListCursors(context.Context) ([]impl.Cursor, error) { panic("backend exploded") }

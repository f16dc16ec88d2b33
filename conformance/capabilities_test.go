package conformance_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
)

// thirdPartyWrapper is what a third party writes around a backend: it
// embeds impl.Store to override one method, and so (Go embeds only the
// interface's methods) silently drops EnqueueLeased.
type thirdPartyWrapper struct{ impl.Store }

func (w thirdPartyWrapper) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	return w.Store.Ack(ctx, keys)
}

// unwrappingWrapper implements impl.Wrapper but forgets to forward
// EnqueueLeased.
type unwrappingWrapper struct{ impl.Store }

func (w unwrappingWrapper) Unwrap() impl.Store { return w.Store }

// forwardingWrapper does it right: Unwrap plus every optional method.
type forwardingWrapper struct{ impl.Store }

func (w forwardingWrapper) Unwrap() impl.Store { return w.Store }
func (w forwardingWrapper) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	le, _ := impl.AsLeasingEnqueuer(w.Store)
	return le.EnqueueLeased(ctx, msgs)
}
func (w forwardingWrapper) WriteHandOff(ctx context.Context, hw impl.HandOffWrite) (impl.HandOffResult, error) {
	h, _ := impl.AsHandOffWriter(w.Store)
	return h.WriteHandOff(ctx, hw)
}
func (w forwardingWrapper) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	bw, _ := impl.AsBlindCursorWriter(w.Store)
	return bw.PutCursorBlind(ctx, c)
}

// oldWrapper forwards the capabilities there were before impl.HandOffWriter
// and not that one.
type oldWrapper struct{ impl.Store }

func (w oldWrapper) Unwrap() impl.Store { return w.Store }
func (w oldWrapper) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	le, _ := impl.AsLeasingEnqueuer(w.Store)
	return le.EnqueueLeased(ctx, msgs)
}
func (w oldWrapper) PutCursorBlind(ctx context.Context, c impl.Cursor) error {
	bw, _ := impl.AsBlindCursorWriter(w.Store)
	return bw.PutCursorBlind(ctx, c)
}

func wrapped(name string, wrap func(impl.Store) impl.Store) conformance.Factory {
	base := memoryFactory()
	return conformance.Factory{
		Name:     base.Name + "+" + name,
		Features: base.Features, // the wrapper claims to be memstore
		New:      func(t testing.TB) impl.Store { return wrap(base.New(t)) },
	}
}

// A wrapper that loses a declared capability fails the suite loudly; before
// Contract/Capabilities the EnqueueLeased check skipped and the run passed.
func TestCapabilityLostInWrapperIsReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(impl.Store) impl.Store
		want string
	}{
		{"embeds", func(s impl.Store) impl.Store { return thirdPartyWrapper{s} }, "Features.LeasedEnqueue asserts impl.LeasingEnqueuer but"},
		{"unwraps", func(s impl.Store) impl.Store { return unwrappingWrapper{s} }, "hides impl.LeasingEnqueuer"},
		{"forwards-all-but-hand-off", func(s impl.Store) impl.Store { return oldWrapper{s} }, "hides impl.HandOffWriter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := conformance.Check(wrapped(tc.name, tc.wrap), conformance.Only("Contract/Capabilities", "Contract/EnqueueLeased"))
			require.False(t, rep.Passed(), "a wrapper that drops LeasingEnqueuer passed:\n%s", rep)
			status, ok := rep.Status("Contract/Capabilities")
			require.True(t, ok)
			require.Equal(t, conformance.Fail, status, "%s", rep)
			found := false
			for _, r := range rep.Failures() {
				if r.Name == "Contract/Capabilities" {
					require.Contains(t, r.Message, tc.want)
					found = true
				}
			}
			require.True(t, found)
		})
	}
}

// A capability the store offers is certified whether or not the Factory
// declares it: undeclared, its checks run (and catch a planted bug in it)
// and Contract/Capabilities passes. It used to fail, after the whole run,
// although the README calls the capabilities optional.
func TestUndeclaredCapabilityIsFoundAndCertified(t *testing.T) {
	only := conformance.Only("Contract/Capabilities", "Contract/EnqueueLeased", "Contract/BlindCursorWrite", "Contract/WriteHandOff", "Linearizability/HandOff")
	f := memoryFactory()
	f.Features.BlindCursor, f.Features.LeasedEnqueue, f.Features.HandOff = false, false, false
	rep := conformance.Check(f, only, conformance.ArtifactsDir(t.TempDir()))
	require.True(t, rep.Passed(), "%s", rep)
	for _, name := range []string{"Contract/Capabilities", "Contract/EnqueueLeased", "Contract/BlindCursorWrite", "Contract/WriteHandOff", "Linearizability/HandOff"} {
		status, _ := rep.Status(name)
		require.Equal(t, conformance.Pass, status, "%s must run on a store that offers it, declared or not:\n%s", name, rep)
	}

	// Found and undeclared, a wrong WriteHandOff is caught.
	bad := wrapped("enqueues-first", func(s impl.Store) impl.Store { return handOffEnqueuesFirst{forwardingWrapper{s}} })
	bad.Features.HandOff = false
	rep = conformance.Check(bad, conformance.Only("Contract/Capabilities", "Contract/WriteHandOff"))
	status, _ := rep.Status("Contract/WriteHandOff")
	require.Equal(t, conformance.Fail, status, "%s", rep)
	status, _ = rep.Status("Contract/Capabilities")
	require.Equal(t, conformance.Pass, status, "%s", rep)
}

// Opting out is explicit, and the report says why each check skipped.
func TestCapabilityOptOut(t *testing.T) {
	f := memoryFactory()
	f.Features.HandOff = false
	f.Features.OptOut = []conformance.Capability{conformance.CapHandOff}
	rep := conformance.Check(f, conformance.Only("Contract/Capabilities", "Contract/WriteHandOff", "Linearizability/HandOff"))
	require.True(t, rep.Passed(), "%s", rep)
	for _, r := range rep.Results {
		if r.Name == "Contract/WriteHandOff" || r.Name == "Linearizability/HandOff" {
			require.Equal(t, conformance.Skip, r.Status, r.Name)
			require.Contains(t, r.Summary, "Features.OptOut lists HandOff")
		}
	}
	// Asserting and opting out at once, or opting out of a name that is no
	// capability, is a mistake in the Factory.
	f.Features.HandOff = true
	rep = conformance.Check(f, conformance.Only("Contract/Capabilities"))
	require.False(t, rep.Passed(), "%s", rep)
	f = memoryFactory()
	f.Features.OptOut = []conformance.Capability{"Handoff"}
	rep = conformance.Check(f, conformance.Only("Contract/Capabilities"))
	require.False(t, rep.Passed(), "%s", rep)
	require.Contains(t, rep.Failures()[0].Message, `"Handoff", which is no capability`)
}

// A wrapper that forwards and unwraps keeps the capability, and the
// reference backend passes the check.
func TestCapabilityForwardedThroughWrapper(t *testing.T) {
	for _, f := range []conformance.Factory{memoryFactory(), wrapped("forwards", func(s impl.Store) impl.Store { return forwardingWrapper{s} })} {
		rep := conformance.Check(f, conformance.Only("Contract/Capabilities", "Contract/EnqueueLeased", "Contract/BlindCursorWrite", "Contract/WriteHandOff"))
		require.True(t, rep.Passed(), "%s", rep)
		for _, name := range []string{"Contract/Capabilities", "Contract/EnqueueLeased", "Contract/BlindCursorWrite", "Contract/WriteHandOff"} {
			status, ok := rep.Status(name)
			require.True(t, ok, name)
			require.Equal(t, conformance.Pass, status, "%s: %s", f.Name, name)
		}
	}
	_, ok := impl.AsLeasingEnqueuer(unwrappingWrapper{forwardingWrapper{memoryFactory().New(t)}})
	require.False(t, ok, "a layer without the method hides it, whatever is below")
}

// handOffEnqueuesFirst is a planted HandOffWriter bug: it runs the leased
// enqueue before the ack, so a key acked and enqueued again in one call
// ends up deleted.
type handOffEnqueuesFirst struct{ forwardingWrapper }

func (w handOffEnqueuesFirst) WriteHandOff(ctx context.Context, hw impl.HandOffWrite) (impl.HandOffResult, error) {
	var r impl.HandOffResult
	var err error
	if len(hw.Enqueue) > 0 {
		if r.Inserted, err = w.EnqueueLeased(ctx, hw.Enqueue); err != nil {
			return r, err
		}
	}
	if r.Acked, err = w.Ack(ctx, hw.Ack); err != nil {
		return r, err
	}
	if len(hw.Cursors) > 0 {
		r.Written, err = w.AdvanceCursors(ctx, hw.Cursors)
	}
	return r, err
}

// Contract/WriteHandOff holds a HandOffWriter to Ack, EnqueueLeased,
// AdvanceCursors in that order: the planted wrong order fails it, the
// right one (forwardingWrapper, memstore itself) passes.
func TestWriteHandOffOrderIsChecked(t *testing.T) {
	rep := conformance.Check(wrapped("enqueues-first", func(s impl.Store) impl.Store { return handOffEnqueuesFirst{forwardingWrapper{s}} }),
		conformance.Only("Contract/WriteHandOff"))
	status, ok := rep.Status("Contract/WriteHandOff")
	require.True(t, ok)
	require.Equal(t, conformance.Fail, status, "%s", rep)
	require.Contains(t, rep.Failures()[0].Message, "ack then re-enqueue one key")
}

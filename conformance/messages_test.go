package conformance_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
)

// deadEarly is a correct, atomic store (memstore, one mutex) with one
// sequential bug: a message dies one attempt before MaxAttempts. It is the
// store of issue 38 whose report said only "Should be true" and sent its
// reader after a race.
type deadEarly struct{ impl.Store }

func (s deadEarly) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	req.MaxAttempts--
	return s.Store.Fail(ctx, req)
}

// deadLate dies one attempt after MaxAttempts: the checks that make a dead
// letter to test something else (EnqueueIdempotent, Requeue) trip on it.
type deadLate struct{ impl.Store }

func (s deadLate) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	req.MaxAttempts++
	return s.Store.Fail(ctx, req)
}

func plantedFactory(name string, wrap func(impl.Store) impl.Store) conformance.Factory {
	base := memoryFactory()
	return conformance.Factory{
		Name:     name,
		Features: conformance.Features{Concurrent: true},
		New:      func(t testing.TB) impl.Store { return wrap(base.New(t)) },
	}
}

// testify's words for a bare assertion and the fields of a dumped
// time.Time: neither names a rule.
var unreadable = regexp.MustCompile(`Should be (true|false)|wall:|ext:|loc:\(|Error Trace:`)

// Every failure of a store with one sequential bug names the rule, the
// call and the field, with times in RFC 3339; the concurrent checks it
// also fails say first that the sequential ones failed.
func TestFailuresNameTheBrokenRule(t *testing.T) {
	cert, err := conformance.Certify([]conformance.Factory{plantedFactory("dead-early", func(s impl.Store) impl.Store { return deadEarly{s} })},
		conformance.RapidChecks(100), conformance.ArtifactsDir(t.TempDir()))
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, cert.WriteText(&text))
	require.False(t, cert.Passed, "%s", text.String())
	lz := 0
	for _, r := range cert.Failures() {
		require.NotRegexp(t, unreadable, r.Message, "%s: the failure does not name the rule", r.Name)
		require.NotEmpty(t, r.Rule, r.Name)
		switch r.Group {
		case conformance.GroupContract:
			require.Contains(t, r.Message, "the last store calls", r.Name)
		case conformance.GroupLinearizability:
			lz++
			require.True(t, strings.HasPrefix(r.Summary, "sequential checks failed too"), "%s must say first that the sequential checks failed: %s", r.Name, r.Summary)
			require.Contains(t, r.Message, "a race is not the first suspect")
			require.Regexp(t, `(key \S+|the whole history).*: its \d+ calls are not linearizable\. Smallest failing window found`, r.Message)
		}
	}
	found := false
	for _, r := range cert.Failures() {
		if r.Name == "Contract/FailRetriesThenDead" {
			found = true
			require.Contains(t, r.Message, `Fail(b1/e1, owner "n1", next attempt 2025-03-01T12:00:03Z, max attempts 3`, "the call, with its time in RFC 3339")
			require.Contains(t, r.Summary, "When Attempts reaches req.MaxAttempts the message becomes dead")
		}
	}
	require.True(t, found, "Contract/FailRetriesThenDead did not fail:\n%s", text.String())
	require.NotZero(t, lz, "the planted store was expected to fail a Linearizability check too:\n%s", text.String())
	require.Contains(t, text.String(), "a race is not the first suspect")
	require.Less(t, strings.Index(text.String(), "a race is not the first suspect"), strings.Index(text.String(), "FAIL Contract/"),
		"the report says it before the failures")
}

// The checks that build a dead letter say, when the Fail that should kill
// it does not, that Fail's rule broke, not theirs.
func TestSetupFailureNamesTheRuleItReliesOn(t *testing.T) {
	rep := conformance.Check(plantedFactory("dead-late", func(s impl.Store) impl.Store { return deadLate{s} }),
		conformance.Only("Contract/EnqueueIdempotent", "Contract/Requeue", "Contract/FailRetriesThenDead"))
	require.Len(t, rep.Failures(), 3, "%s", rep)
	for _, r := range rep.Failures() {
		require.NotRegexp(t, unreadable, r.Message, r.Name)
		require.Contains(t, r.Summary, `"When Attempts reaches req.MaxAttempts the message becomes dead"`, r.Name)
	}
}

// A store whose Requeue clears LastError, or whose Fail leaves
// NextAttemptAt alone when it kills a message, is told the sentence of the
// contract it broke.
type requeueClearsError struct{ impl.Store }

func (s requeueClearsError) Requeue(ctx context.Context, k impl.MessageKey, now time.Time) (bool, error) {
	ok, err := s.Store.Requeue(ctx, k, now)
	if !ok || err != nil {
		return ok, err
	}
	// Rebuild the row without its history, as a store that re-enqueues
	// a requeued message would.
	ms, err := s.Store.ListMessages(ctx, k.Subscriber)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Key() == k {
			if _, err := s.Store.Ack(ctx, []impl.MessageKey{k}); err != nil {
				return false, err
			}
			m.NextAttemptAt = now
			_, err = s.Store.Enqueue(ctx, []impl.Message{m})
			return true, err
		}
	}
	return true, nil
}

func TestContractAnswersAreQuoted(t *testing.T) {
	rep := conformance.Check(plantedFactory("requeue-clears-error", func(s impl.Store) impl.Store { return requeueClearsError{s} }),
		conformance.Only("Contract/Requeue"))
	require.False(t, rep.Passed(), "%s", rep)
	msg := rep.Failures()[0].Message
	require.Contains(t, msg, "Requeue keeps LastError (why the message died)")
	require.Contains(t, msg, `b1/e1 LastError: want "poison", got ""`)
}

// Replay hints name the flags of the entry point that ran the suite:
// certify and Main take --rapid-seed, Check's caller an option. rapid's
// own "-rapid.seed" is a go test flag that both commands reject.
func TestReplayHintsUseTheEntryPointsFlags(t *testing.T) {
	f := plantedFactory("dead-early", func(s impl.Store) impl.Store { return deadEarly{s} })
	var out, errOut bytes.Buffer
	code := conformance.MainArgs([]string{"--only", "StateMachine", "--checks", "100"}, &out, &errOut, f)
	require.Equal(t, 1, code, "%s%s", out.String(), errOut.String())
	seed := regexp.MustCompile(`--only StateMachine/Random --rapid-seed (\d+)`).FindStringSubmatch(out.String())
	require.NotNil(t, seed, "the hint names certify's own flags:\n%s", out.String())
	require.NotContains(t, out.String(), "-rapid.seed")

	// The hint replays: the same failure again from that seed alone.
	out.Reset()
	code = conformance.MainArgs([]string{"--only", "StateMachine/Random", "--rapid-seed", seed[1], "--checks", "1"}, &out, &errOut, f)
	require.Equal(t, 1, code, "replaying --rapid-seed %s found nothing:\n%s", seed[1], out.String())

	rep := conformance.Check(f, conformance.Only("StateMachine"))
	require.Contains(t, rep.Failures()[0].Message, "conformance.RapidSeed(")
	require.NotContains(t, rep.Failures()[0].Message, "-rapid.seed")
}

// A store that is right one call at a time and wrong only under
// concurrency gets no "a race is not the first suspect": its sequential
// checks pass. Its failure names the cursor key it regressed.
func TestRaceFailureNamesTheKeyWithoutTheSequentialNote(t *testing.T) {
	var racy conformance.Factory
	for _, f := range conformance.RacyBackends(memoryFactory()) {
		if strings.HasSuffix(f.Name, conformance.BugCursorReadThenWrite) {
			racy = f
		}
	}
	require.NotEmpty(t, racy.Name)
	for attempt := 1; attempt <= 3; attempt++ { // a race is caught by most runs, not all (race_test.go)
		cert, err := conformance.Certify([]conformance.Factory{racy}, conformance.Only(conformance.GroupContract, conformance.GroupLinearizability),
			conformance.ArtifactsDir(t.TempDir()))
		require.NoError(t, err)
		if cert.Passed {
			continue
		}
		var text bytes.Buffer
		require.NoError(t, cert.WriteText(&text))
		require.NotContains(t, text.String(), "a race is not the first suspect")
		for _, r := range cert.Failures() {
			require.Equal(t, conformance.GroupLinearizability, r.Group, "%s", text.String())
			require.Regexp(t, `key cursor\("s\d?",""\): its \d+ calls are not linearizable`, r.Message)
		}
		return
	}
	t.Fatal("the planted cursor race was not caught in 3 runs")
}

package conformance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

func memoryFactory() conformance.Factory {
	return conformance.Factory{
		Name: "memstore",
		New: func(t testing.TB) impl.Store {
			s := memstore.New()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Features: conformance.Features{Concurrent: true, BlindCursor: true, LeasedEnqueue: true, HandOff: true},
	}
}

func TestMemoryConformance(t *testing.T) {
	conformance.Run(t, memoryFactory())
}

func TestMemoryCheckPasses(t *testing.T) {
	rep := conformance.Check(memoryFactory(), conformance.RapidChecks(30), conformance.Seed(7))
	require.True(t, rep.Passed(), "the clean memstore must pass:\n%s", rep)
	for _, group := range []string{conformance.GroupContract, conformance.GroupStateMachine, conformance.GroupLinearizability} {
		ran := 0
		for _, r := range rep.Results {
			if r.Group == group {
				require.Equal(t, conformance.Pass, r.Status, r.Name)
				ran++
			}
		}
		require.NotZero(t, ran, "group %s did not run", group)
	}
	status, _ := rep.Status("StateMachine/Random")
	require.Equal(t, conformance.Pass, status)
	for _, r := range rep.Results {
		if r.Name == "StateMachine/Random" {
			require.Contains(t, r.Summary, "passed 30 tests", "RapidChecks must reach rapid")
		}
	}
}

// Every planted bug must make Check fail, and the random state machine
// alone must catch each one: the contract scripts were written knowing the
// bugs, the state machine was not.
func TestMemoryBuggyBackendsAreCaught(t *testing.T) {
	buggy := conformance.BuggyBackends(memoryFactory())
	require.Len(t, buggy, 7, "memstore declares BlindCursor, so every bug applies")
	for _, f := range buggy {
		t.Run(f.Name, func(t *testing.T) {
			rep := conformance.Check(f, conformance.RapidChecks(1000), conformance.ShrinkTime(10*time.Second), conformance.ArtifactsDir(t.TempDir()))
			require.False(t, rep.Passed(), "%s passed the suite:\n%s", f.Name, rep)
			status, ok := rep.Status("StateMachine/Random")
			require.True(t, ok)
			require.Equal(t, conformance.Fail, status, "the state machine missed %s:\n%s", f.Name, rep)
			for _, r := range rep.Failures() {
				if r.Name == "StateMachine/Random" {
					require.Contains(t, r.Message, "conformance.RapidSeed(", "a state-machine failure must say how to replay it")
					require.NotContains(t, r.Message, "-rapid.seed=", "Check's caller replays with an option, not go test's flag")
					require.Contains(t, r.Message, "backend and model disagree")
				}
				require.NotEmpty(t, r.Summary)
				t.Logf("caught by %s: %s", r.Name, r.Summary)
			}
		})
	}
}

package conformance_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/conformance"
	"github.com/deliverysim/deliverysim/impl"
)

// givesUp is a store that retries its conflicts a fixed number of times and
// then hands the caller the serialization failure, as pgstore did under
// load before issue 38. Here the give-up is planted, not timed: every
// giveUpEvery-th write call of a store fails with SQLSTATE 40001 and no
// effect, so the suite sees the same errors on a quiet machine and a
// loaded one, and only its own judgement can differ.
type givesUp struct {
	impl.Store
	calls atomic.Int64
}

const giveUpEvery = 5

func (g *givesUp) conflict() error {
	if g.calls.Add(1)%giveUpEvery != 0 {
		return nil
	}
	return fmt.Errorf("planted: gave up after 30 tries: %w",
		&pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: pgerrcode.SerializationFailure, Message: "could not serialize access due to concurrent update"})
}

func (g *givesUp) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if err := g.conflict(); err != nil {
		return nil, err
	}
	return g.Store.AdvanceCursors(ctx, cs)
}

func (g *givesUp) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	if err := g.conflict(); err != nil {
		return 0, err
	}
	return g.Store.Enqueue(ctx, msgs)
}

func (g *givesUp) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if err := g.conflict(); err != nil {
		return nil, err
	}
	return g.Store.Claim(ctx, req)
}

func (g *givesUp) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	if err := g.conflict(); err != nil {
		return impl.Message{}, false, err
	}
	return g.Store.Fail(ctx, req)
}

func (g *givesUp) MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error) {
	if err := g.conflict(); err != nil {
		return false, err
	}
	return g.Store.MarkProcessed(ctx, req)
}

func givesUpFactory(ambiguous bool) conformance.Factory {
	base := memoryFactory()
	return conformance.Factory{
		Name:     "memstore+gives-up-on-conflicts",
		New:      func(t testing.TB) impl.Store { return &givesUp{Store: base.New(t)} },
		Features: conformance.Features{Concurrent: true, AmbiguousErrors: ambiguous},
	}
}

// withLoad runs fn beside two CPU burners per processor, stopped and
// reaped before it returns: a loaded machine inside the test.
func withLoad(fn func()) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() { // spins on purpose: a CPU burner
			}
		})
	}
	defer wg.Wait()
	defer stop.Store(true)
	fn()
}

// verdicts is each check's status in rep, by name.
func verdicts(rep conformance.Report) map[string]conformance.Status {
	out := map[string]conformance.Status{}
	for _, r := range rep.Results {
		out[r.Name] = r.Status
	}
	return out
}

// A conflict the store gave up on is judged by the contract's error rule
// (impl.Store, "Errors": a conflict between concurrent calls is the
// store's to resolve while the context lives), the same way on a quiet
// machine and a loaded one: a store that does not declare
// AmbiguousErrors fails every group that meets the error, naming the
// rule; one that declares it is followed through both outcomes and
// passes, as for any fault.
func TestAGivenUpConflictIsJudgedByTheContractNotTheLoad(t *testing.T) {
	for _, declared := range []bool{false, true} {
		t.Run(fmt.Sprintf("AmbiguousErrors=%v", declared), func(t *testing.T) {
			f := givesUpFactory(declared)
			check := func() conformance.Report {
				return conformance.Check(f, conformance.RapidChecks(20), conformance.ShrinkTime(100*time.Millisecond), conformance.Seed(3), conformance.ArtifactsDir(t.TempDir()),
					conformance.Only("Contract/EnqueueIdempotent", "Contract/Requeue", conformance.GroupStateMachine, "Linearizability/PerKey"))
			}
			quiet := check()
			var loaded conformance.Report
			withLoad(func() { loaded = check() })
			require.Equal(t, verdicts(quiet), verdicts(loaded), "the verdict changed with the load:\nquiet:\n%s\nloaded:\n%s", quiet, loaded)
			for _, rep := range []conformance.Report{quiet, loaded} {
				if declared {
					require.True(t, rep.Passed(), "%s", rep)
					status, _ := rep.Status("StateMachine/Random")
					require.Equal(t, conformance.Pass, status)
					continue
				}
				require.False(t, rep.Passed())
				for _, name := range []string{"Contract/EnqueueIdempotent", "StateMachine/Random", "Linearizability/PerKey"} {
					status, _ := rep.Status(name)
					require.Equal(t, conformance.Fail, status, "%s\n%s", name, rep)
				}
				for _, r := range rep.Failures() {
					require.Contains(t, r.Message, "40001", r.Name)
					t.Logf("%s: %s", r.Name, firstLine(r.Message))
				}
			}
		})
	}
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// Package enginetest certifies the example Python engine (../engine.py) the
// way an outside implementer would (examples/internal/chaostest): the
// correct engine must pass; each planted variant (DSIM_PY_BUG) must fail on
// the invariant that names its bug, which shows the harness can tell them
// apart.
package enginetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/deliverysim/deliverysim/examples/internal/chaostest"
)

var python = chaostest.Engine{
	Runtime: "python3", Install: "install Python 3",
	ExePath: []string{"-c", "import sys; print(sys.executable)"},
	Script:  filepath.Join("..", "engine.py"),
	// The engine inherits chaos's environment: its state lives in the
	// test's temp dir, gone with the test.
	Variant: func(t *testing.T, bug string) ([]string, []string) {
		return nil, []string{"DSIM_PY_BUG=" + bug, "DSIM_PY_DB=" + filepath.Join(t.TempDir(), "engine.sqlite")}
	},
}

func TestMain(m *testing.M) { os.Exit(chaostest.Main(m)) }

// TestSmoke: the quick protocol check passes the engine, and on a wrong
// signature names the signing step.
func TestSmoke(t *testing.T) { python.Smoke(t, "reserialise-signature") }

// TestCorrectEnginePasses: the engine as written passes a chaos run with
// snapshot sources declared, every core invariant judged.
func TestCorrectEnginePasses(t *testing.T) {
	t.Parallel()
	python.CorrectPasses(t)
}

// TestPlantedBugsFail: each variant is a bug a real engine could ship, and
// chaos must exit 1 naming the invariant that describes it.
func TestPlantedBugsFail(t *testing.T) {
	noDB := chaostest.NoDB
	python.PlantedFail(t, append([]chaostest.Variant{
		{Bug: "cursor-before-queue", Invariant: "no-silent-loss", Why: "the cursor moves before the batch's rows are durable; a kill loses them"},
		{Bug: "no-retry", Invariant: "no-silent-loss", Why: "a failed attempt is given up as if delivered"},
		{Bug: "reserialise-signature", Invariant: "signed-requests", Why: "the signature covers re-serialised JSON, not the bytes sent"},
		{Bug: "resume-from-head", Invariant: "no-silent-loss", Why: "a restart subscribes from=head, skipping what was produced while down"},
		{Bug: "ignore-leave", Invariant: "no-phantom-delivery", Why: "a membership entry with member:false is read as a join"},
		// The key is published a quarter of the way in: at 15 s (3.75 s)
		// the engine at load 30 was not yet sending, and a kill's downtime
		// may cover it; at 30 s with no kills it has 7.5 s.
		{Bug: "ignore-key", Invariant: "key-held", Why: "a bot's events are sent before the registry shows its key", Duration: "30s", Kills: "0"},
		// With the default cuts (about one per 5 s) a 15 s run never drops
		// bot-1's old secret and can excuse a 9th send (chaostest.NoDB).
		{Bug: "retry-forever", Invariant: "bounded-retry", Why: "a message is never dead-lettered (the workload's permanent 4xx exposes it)", Extra: noDB},
		{Bug: "stale-secret", Invariant: "signed-requests", Why: "the first secret seen is used for ever (the workload rotates one)", Extra: noDB},
		// requeue-replays (a replayed event queued again, its attempts
		// starting over) is not here: it shows only when a dead-lettered
		// event happens to be replayed, which not every run does
		// (README.md, "Planted bugs").
	}, chaostest.Shared...))
}

// Package enginetest certifies the example Node.js engine (../engine.js)
// the way an outside implementer would (examples/internal/chaostest): the
// correct engine must pass; each planted variant (--bug) must fail on the
// invariant that names its bug.
package enginetest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/deliverysim/deliverysim/examples/internal/chaostest"
)

var node = chaostest.Engine{
	Runtime: "node", Install: "install Node.js (apt-get install nodejs)",
	ExePath: []string{"-p", "process.execPath"},
	Script:  filepath.Join("..", "engine.js"),
	// The variant is chosen on the engine's command line, so the report's
	// engine command is the variant: `chaos --replay` of it runs the same
	// bug. Any DSIM_NODE_BUG of the caller's is cleared; the journal lives
	// in the run's DELIVERYSIM_STATE_DIR, which chaos removes.
	Variant: func(t *testing.T, bug string) ([]string, []string) {
		if bug == "" {
			return nil, []string{"DSIM_NODE_BUG="}
		}
		return []string{"--bug", bug}, []string{"DSIM_NODE_BUG="}
	},
}

func TestMain(m *testing.M) { os.Exit(chaostest.Main(m)) }

// TestSmoke: the quick protocol check passes the engine, and on a
// signature over re-serialised JSON names the signing step (the smoke
// payloads are ones JSON.stringify does not write back byte for byte).
func TestSmoke(t *testing.T) { node.Smoke(t, "reserialise-signature") }

// TestCorrectEnginePasses: the engine as written passes a chaos run with
// snapshot sources declared, every core invariant judged.
func TestCorrectEnginePasses(t *testing.T) {
	t.Parallel()
	node.CorrectPasses(t)
}

// TestPlantedBugsFail: each variant is a bug a real engine could ship
// (issue 37's miss classes, the rules judged with the declared settings,
// snapshot sources), and chaos must exit 1 naming the invariant that
// describes it. Some need a workload that reaches their rule (a bot
// answering 410, payloads that change when re-serialised, a restart after
// long downtime, kills aimed at the hand-off): see README.md.
func TestPlantedBugsFail(t *testing.T) {
	node.PlantedFail(t, append([]chaostest.Variant{
		{Bug: "reserialise-signature", Invariant: "signed-requests", Why: "the signature covers JSON.stringify(JSON.parse(body)), not the bytes sent"},
		{Bug: "cursor-before-queue", Invariant: "no-silent-loss", Why: "the cursor is journaled at once, the messages only after their first answer; a kill loses them"},
	}, chaostest.Shared...))
}

package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model"
)

func advanceOp(client int, call, ret int64, major int64, written bool) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret,
		Input:  model.Op{Kind: model.OpAdvanceCursors, Cursors: []impl.Cursor{{Key: impl.CursorKey{Stream: "s1"}, Pos: impl.Position{Major: major}, UpdatedAt: t0}}},
		Output: lzOut{res: model.Result{Written: []bool{written}}}}
}

func getOp(client int, call, ret int64, major int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret,
		Input:  model.Op{Kind: model.OpGetCursor, CursorKey: impl.CursorKey{Stream: "s1"}},
		Output: lzOut{res: model.Result{OK: true, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: impl.Position{Major: major}, UpdatedAt: t0}}}}
}

// The window of a race holds the concurrent writes and the read they
// spoiled, marks the read, and leaves out what came before; two
// concurrent advances that both wrote can only have ended at the higher
// position.
func TestExplainIllegalRaceWindow(t *testing.T) {
	history := []porcupine.Operation{
		advanceOp(0, 1, 2, 1, true),
		getOp(1, 3, 4, 1),
		advanceOp(0, 5, 14, 5, true),
		advanceOp(1, 6, 13, 3, true),
		getOp(2, 15, 16, 3), // the regressed cursor
		getOp(0, 17, 18, 3),
	}
	out := explainIllegal(history, 30*time.Second)
	t.Log(out)
	for _, want := range []string{
		`key cursor("s1",""): its 6 calls are not linearizable`,
		"its calls 3 to 5 in call order (3 calls)",
		`pos=1.0/""`, // the state the first two calls leave
		`GetCursor("s1","") -> ("s1","" pos=3.0/"" token= at=2025-03-01T12:00:00Z)   <==`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(out, "[client 0, 0-1] GetCursor") || strings.Count(out, "   <==") != 1 {
		t.Error("the window holds more than the race and the read it spoiled, or marks more than one call")
	}
}

// A call still running when the culprit returned is shown with an open
// outcome; a linearizable history gets no explanation.
func TestExplainIllegalOpenCallsAndLegalHistories(t *testing.T) {
	legal := []porcupine.Operation{advanceOp(0, 1, 4, 2, true), getOp(1, 2, 3, 2)}
	if out := explainIllegal(legal, 30*time.Second); out != "" {
		t.Fatalf("a linearizable history was explained: %s", out)
	}
	history := []porcupine.Operation{
		advanceOp(0, 1, 2, 4, true),
		advanceOp(1, 3, 20, 9, true), // still running when the read returns
		getOp(2, 4, 5, 2),            // no order gives 2
	}
	out := explainIllegal(history, 30*time.Second)
	t.Log(out)
	if !strings.Contains(out, "[client 1, 0-] AdvanceCursors") || !strings.Contains(out, "(still running when the marked call returned: its outcome is left open)") {
		t.Errorf("the open call is not shown as open:\n%s", out)
	}
}

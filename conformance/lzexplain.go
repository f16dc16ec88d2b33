package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deliverysim/deliverysim/model"
)

// A non-linearizable history of thousands of calls says "something is
// wrong" and no more; the HTML timeline needs a browser. explainIllegal
// puts the evidence in the text: the key whose calls are not linearizable,
// and the smallest window of that key's calls found that no order
// explains, with the state the calls before it leave.
//
// The window is found in two steps, each with porcupine on the key's calls
// only, sorted by call time. First the shortest prefix that is not
// linearizable: its last call is one whose result no order of the calls
// before it explains. Then the window starts at the last quiescent point
// before that call, the latest call that began after every earlier call
// had returned. Every linearization of the prefix puts all the calls
// before that point first, so the window alone, started from any state
// those calls can leave, is not linearizable either: porcupine confirms
// it from the one state its linearization of them gives.

// maxWindowLines bounds the calls a failure prints.
const maxWindowLines = 40

// explainIllegal returns the text naming the failing key and window, or
// "" when none was found within budget (the failure still stands; the
// visualization has it all).
func explainIllegal(history []porcupine.Operation, budget time.Duration) string {
	deadline := time.Now().Add(budget)
	left := func() time.Duration { return max(time.Until(deadline), time.Millisecond) }
	for _, part := range partitionByKey(history) {
		if time.Now().After(deadline) {
			return ""
		}
		ops := slices.Clone(part)
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		if porcupine.CheckOperationsTimeout(lzModel(model.Store{}), ops, left()) != porcupine.Illegal {
			continue
		}
		key := "key " + ops[0].Input.(model.Op).Partition()
		if key == "key " {
			key = "the whole history (a call in it touches several keys, so it is checked as one)"
		}
		illegal := func(init model.Store, ops []porcupine.Operation) bool {
			return porcupine.CheckOperationsTimeout(lzModel(init), ops, left()) == porcupine.Illegal
		}
		// The shortest illegal prefix: grow until illegal, then bisect.
		// Illegality need not be monotone in the prefix length, so the
		// bisection's answer is checked, and the whole key's calls stand
		// when it does not hold.
		k := len(ops)
		lo, hi := 0, 1 // ops[:lo] is linearizable
		for hi < len(ops) && !illegal(model.Store{}, ops[:hi]) {
			lo, hi = hi, hi*2
		}
		hi = min(hi, len(ops))
		for lo+1 < hi && time.Now().Before(deadline) {
			mid := (lo + hi) / 2
			if illegal(model.Store{}, ops[:mid]) {
				hi = mid
			} else {
				lo = mid
			}
		}
		if illegal(model.Store{}, ops[:hi]) {
			k = hi
		}
		// The last quiescent point at or before the prefix's last call.
		q := 0
		for i := k - 1; i > 0; i-- {
			quiet := true
			for _, op := range ops[:i] {
				if op.Return >= ops[i].Call {
					quiet = false
					break
				}
			}
			if quiet {
				q = i
				break
			}
		}
		start := model.Store{}
		if q > 0 {
			st, ok := linearizedState(ops[:q], left())
			if !ok || !illegal(st, ops[q:k]) {
				q, start = 0, model.Store{}
			} else {
				start = st
			}
		}
		return renderWindow(key, len(ops), ops[q:k], q, start)
	}
	return ""
}

// lzModel is the unpartitioned model started from init.
func lzModel(init model.Store) porcupine.Model { return porcupineModelFrom(nil, init) }

// linearizedState applies one linearization of a linearizable history (as
// porcupine found it) to the empty model and returns the state it leaves.
func linearizedState(ops []porcupine.Operation, timeout time.Duration) (model.Store, bool) {
	res, info := porcupine.CheckOperationsVerbose(lzModel(model.Store{}), ops, timeout)
	if res != porcupine.Ok {
		return model.Store{}, false
	}
	parts := info.PartialLinearizations()
	if len(parts) != 1 || len(parts[0]) == 0 || len(parts[0][0]) != len(ops) {
		return model.Store{}, false
	}
	s := model.Store{}
	for _, id := range parts[0][0] {
		op := ops[id]
		if op.Output.(lzOut).err != nil {
			return model.Store{}, false // no quiescent point follows a call of unknown outcome
		}
		s, _ = op.Input.(model.Op).Apply(s)
	}
	return s, true
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func renderWindow(key string, total int, window []porcupine.Operation, first int, start model.Store) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: its %d calls are not linearizable. Smallest failing window found: its calls %d to %d in call order (%s). ",
		key, total, first+1, first+len(window), plural(len(window), "call"))
	if first > 0 {
		fmt.Fprintf(&b, "Every call before them had returned before the first began, leaving the state\n    %s\n", start)
	} else {
		b.WriteString("They start from the empty store.\n")
	}
	b.WriteString("  No order of these calls, each taking effect at one instant between its call and its return, gives the results the store returned")
	b.WriteString(" (stamps are the order of calls and returns; the last call is the one whose result no order explains):\n")
	base := window[0].Call
	lines := window
	skipped := 0
	if len(lines) > maxWindowLines {
		skipped = len(lines) - maxWindowLines
		lines = lines[len(lines)-maxWindowLines:]
		fmt.Fprintf(&b, "    ... %d earlier calls of the window left out\n", skipped)
	}
	for _, op := range lines {
		out := op.Output.(lzOut)
		res := out.res.Format(op.Input.(model.Op).Kind)
		if out.err != nil {
			res = "error (outcome unknown): " + out.err.Error()
		}
		fmt.Fprintf(&b, "    [client %d, %d-%d] %s -> %s\n", op.ClientId, op.Call-base, op.Return-base, op.Input.(model.Op), res)
	}
	return strings.TrimRight(b.String(), "\n")
}

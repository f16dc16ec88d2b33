package conformance

import (
	"cmp"
	"errors"
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
// The window is found with porcupine on the key's calls only. A prefix
// of the history cut at an instant holds the calls made by then; those
// still running (they returned later) may or may not have taken effect,
// so the cut gives them an unknown outcome, as the suite does for a call
// that failed ambiguously. Cut so, every prefix of a linearizable history
// is linearizable, so the first non-linearizable cut, found by bisection
// over the returns' instants, is evidence on its own: it ends with a
// return whose result no order of what came before explains. The window
// then starts at a quiescent point before that call (a call that began
// after every earlier call had returned; the last but one, so that the
// calls that made the state the culprit read are shown too): every
// linearization puts the calls before that point first, so the window
// from any state they can leave is not linearizable either, which
// porcupine confirms from the state its linearization of them gives.

// maxWindowLines bounds the calls a failure prints.
const maxWindowLines = 40

// errStillRunning marks a call that had not returned at a prefix's cut.
var errStillRunning = errors.New("still running at the cut")

// cutAt is the calls of ops (sorted by call) made at or before the
// instant at: a call that returned after it gets an unknown outcome and a
// return after every other call's.
func cutAt(ops []porcupine.Operation, at int64) []porcupine.Operation {
	last := int64(0)
	for _, op := range ops {
		last = max(last, op.Return)
	}
	var cut []porcupine.Operation
	for i, op := range ops {
		if op.Call > at {
			break
		}
		if op.Return > at && op.Output.(lzOut).err == nil {
			op.Output = lzOut{err: errStillRunning}
			op.Return = last + 1 + int64(i)
		}
		cut = append(cut, op)
	}
	return cut
}

// explainIllegal returns the text naming the failing key and window, or
// "" when porcupine could not decide one of its questions within timeout
// (the verdict's own bound; the failure still stands, and the
// visualization has it all). It asks porcupine about 2·log2(calls of the
// key) questions, each on no more calls than the verdict's; no overall
// clock bounds it, so what it finds does not depend on how busy the
// machine is.
func explainIllegal(history []porcupine.Operation, timeout time.Duration) string {
	undecided := false
	check := func(init model.Store, ops []porcupine.Operation) porcupine.CheckResult {
		res := porcupine.CheckOperationsTimeout(lzModel(init), ops, timeout)
		if res == porcupine.Unknown {
			undecided = true
		}
		return res
	}
	illegal := func(init model.Store, ops []porcupine.Operation) bool { return check(init, ops) == porcupine.Illegal }
	for _, part := range partitionByKey(history) {
		ops := slices.Clone(part)
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		if !illegal(model.Store{}, ops) {
			if undecided {
				return ""
			}
			continue
		}
		key := "key " + ops[0].Input.(model.Op).Partition()
		if key == "key " {
			key = "the whole history (a call in it touches several keys, so it is checked as one)"
		}
		// The first illegal cut, over the instants of the calls' returns:
		// cut at the last return it is the whole history, illegal, and a
		// cut before the first return holds no result to contradict.
		var returns []int64
		for _, op := range ops {
			if op.Output.(lzOut).err == nil {
				returns = append(returns, op.Return)
			}
		}
		slices.Sort(returns)
		if len(returns) == 0 {
			return "" // every call failed: nothing returned a result to contradict
		}
		lo, hi := -1, len(returns)-1 // cut at returns[lo] linearizable (or none), at returns[hi] not
		for lo+1 < hi && !undecided {
			mid := (lo + hi) / 2
			if illegal(model.Store{}, cutAt(ops, returns[mid])) {
				hi = mid
			} else {
				lo = mid
			}
		}
		if undecided {
			return ""
		}
		window := cutAt(ops, returns[hi])
		culprit := slices.IndexFunc(ops, func(op porcupine.Operation) bool { return op.Return == returns[hi] })
		// The window starts at a quiescent point: one before the
		// culprit's, so that the calls that made the state it read are in
		// the window too (a race shows in the calls before the one whose
		// result it spoiled), not only in the state before it.
		q := 0
		for n, i := 0, culprit; i > 0 && n < 2; i-- {
			if quiescent(ops, i) {
				q = i
				n++
			}
		}
		start := model.Store{}
		if q > 0 {
			st, ok := linearizedState(ops[:q], timeout)
			if ok && illegal(st, window[q:]) {
				start, window = st, window[q:]
			} else {
				q = 0
			}
		}
		return renderWindow(key, len(ops), window, q, start, returns[hi])
	}
	return ""
}

// quiescent reports whether every call before ops[i] (sorted by call)
// returned before it began.
func quiescent(ops []porcupine.Operation, i int) bool {
	for _, op := range ops[:i] {
		if op.Return >= ops[i].Call {
			return false
		}
	}
	return true
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

func renderWindow(key string, total int, window []porcupine.Operation, first int, start model.Store, culprit int64) string {
	var b strings.Builder
	span := fmt.Sprintf("its call %d in call order", first+1)
	if len(window) > 1 {
		span = fmt.Sprintf("its calls %d to %d in call order (%s)", first+1, first+len(window), plural(len(window), "call"))
	}
	fmt.Fprintf(&b, "%s: its %d calls are not linearizable. Smallest failing window found: %s. ", key, total, span)
	if first > 0 {
		fmt.Fprintf(&b, "Every call before it had returned before it began, leaving the state\n    %s\n", start)
	} else {
		b.WriteString("They start from the empty store.\n")
	}
	b.WriteString("  No order of these calls, each taking effect at one instant between its call and its return, gives the results the store returned")
	b.WriteString(" (stamps are the order of calls and returns; the call marked <== returned the result no order explains;")
	b.WriteString(" a call still running then may or may not have taken effect):\n")
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
		stamps := fmt.Sprintf("%d-%d", op.Call-base, op.Return-base)
		switch {
		case errors.Is(out.err, errStillRunning):
			res, stamps = "(still running when the marked call returned: its outcome is left open)", fmt.Sprintf("%d-", op.Call-base)
		case out.err != nil:
			res = "error (outcome unknown): " + out.err.Error()
		}
		mark := ""
		if op.Return == culprit {
			mark = "   <=="
		}
		fmt.Fprintf(&b, "    [client %d, %s] %s -> %s%s\n", op.ClientId, stamps, op.Input.(model.Op), res, mark)
	}
	return strings.TrimRight(b.String(), "\n")
}

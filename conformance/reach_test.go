package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

func memFactory() Factory {
	return Factory{
		Name: "memstore",
		New: func(t testing.TB) impl.Store {
			s := memstore.New()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Features: Features{Concurrent: true, BlindCursor: true},
	}
}

// The state machine steers Fail and Requeue to leased and dead messages:
// most are accepted, so dead letters and requeues really happen. (Drawn
// blind over the key space, as before, about 1 Fail in 20 was accepted.)
func TestStateMachineReachesFailAndRequeue(t *testing.T) {
	var got []reach
	reachObserved = func(r reach) { got = append(got, r) }
	defer func() { reachObserved = nil }()
	rep := Check(memFactory(), Only("StateMachine/Random"), RapidChecks(100), RapidSeed(1))
	if !rep.Passed() {
		t.Fatalf("memstore failed:\n%s", rep)
	}
	if len(got) != 1 {
		t.Fatalf("observed %d state-machine runs, want 1", len(got))
	}
	r := got[0]
	t.Log(r.String())
	if r.fail == 0 || 2*r.failOK < r.fail {
		t.Errorf("Fail accepted %d of %d: want at least half", r.failOK, r.fail)
	}
	if r.requeue == 0 || 2*r.requeueOK < r.requeue {
		t.Errorf("Requeue accepted %d of %d: want at least half", r.requeueOK, r.requeue)
	}
	if r.dead == 0 {
		t.Error("no Fail dead-lettered a message")
	}
	status, _ := rep.Status("StateMachine/Random")
	if res := rep.Results[0]; status != Pass || !contains(res.Summary, "passed 100 tests") || !contains(res.Summary, reachPrefix) {
		t.Errorf("summary should keep rapid's tally and add the reach line: %q", res.Summary)
	}
}

// A Requeue that drops the payload is caught on every run, not 1 in 20:
// ten rapid seeds, ten catches, each naming the field.
func TestRequeueDroppingThePayloadIsAlwaysCaught(t *testing.T) {
	var bug Factory
	for _, f := range BuggyBackends(memFactory()) {
		if f.Name == "memstore+bug:"+BugRequeueDropsPayload {
			bug = f
		}
	}
	if bug.New == nil {
		t.Fatal("BuggyBackends has no " + BugRequeueDropsPayload)
	}
	for seed := uint64(1); seed <= 10; seed++ {
		rep := Check(bug, Only("StateMachine/Random"), RapidChecks(100), RapidSeed(seed), ShrinkTime(200*time.Millisecond))
		status, _ := rep.Status("StateMachine/Random")
		if status != Fail {
			t.Errorf("rapid seed %d: the payload-dropping Requeue passed the state machine", seed)
			continue
		}
		if msg := rep.Failures()[0].Message; !contains(msg, "Payload") && !contains(msg, "backend and model disagree") {
			t.Errorf("rapid seed %d: failure does not point at the message: %s", seed, msg)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

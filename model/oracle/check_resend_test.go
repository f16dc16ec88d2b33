package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// resend-with-cause: a node told a 2xx for a message whose row has left the
// store (or that had none) does not send it again in that incarnation
// without a cause the world shows since; each cause in turn.
func TestCheckResendWithCause(t *testing.T) {
	type step func(r *chkRun)
	produce := func(r *chkRun) {
		r.member("s1", "b1", impl.Position{}, true).at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
	}
	queued := func(r *chkRun) { r.deliver("b1", "e1", chkP(1, 0)) }
	direct := func(r *chkRun) {
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 7})
		r.handle("b1", "e1")
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", OK: true, Request: 7})
	}
	// The same node writes a row of the message again, unprompted, and
	// sends it (a stale pending write redone after the delivery).
	rowAgain := func(r *chkRun) {
		r.at(time.Minute).enqueue("b1", "e1").send("b1", "e1", chkP(1, 0), 1)
	}
	sendAgain := func(r *chkRun) {
		r.at(time.Minute).add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 8})
	}
	crash := func(r *chkRun) {
		r.at(30 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"})
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: r.now})
	}
	cases := []struct {
		name  string
		steps []step
		bad   bool
	}{
		{"a queued message sent again after its 2xx and ack", []step{produce, queued, rowAgain}, true},
		{"a direct send sent again after its 2xx", []step{produce, direct, sendAgain}, true},
		{"a row written again after a direct 2xx", []step{produce, direct, rowAgain}, true},
		{"a 2xx whose row is still there is not done", []step{produce, func(r *chkRun) {
			r.enqueue("b1", "e1").send("b1", "e1", chkP(1, 0), 1).ok("b1", "e1")
		}, sendAgain}, false},
		{"another incarnation", []step{produce, queued, crash, rowAgain}, false},
		{"another node", []step{produce, queued, func(r *chkRun) {
			r.at(time.Minute).add(Observation{Kind: ObsSend, Node: "n2", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 9})
		}}, false},
		{"a new arrival since", []step{produce, queued, func(r *chkRun) { r.at(40 * time.Second).arrive("e1") }, rowAgain}, false},
		{"a membership change since", []step{produce, queued, func(r *chkRun) { r.member("s1", "b2", impl.Position{}, true) }, rowAgain}, false},
		{"a store fault since", []step{produce, queued, func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Enqueue", Ambiguous: true})
		}, rowAgain}, false},
		{"a store fault after the arrival, before the 2xx (a hand-off redone)", []step{produce, func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Enqueue", Ambiguous: true})
		}, queued, rowAgain}, false},
		{"a store fault before the arrival does not excuse", []step{func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Enqueue"})
		}, produce, queued, rowAgain}, true},
		{"a failure of an older request told since", []step{produce, func(r *chkRun) {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 6})
		}, queued, func(r *chkRun) {
			r.at(40 * time.Second).add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "timeout", Request: 6})
		}, rowAgain}, false},
		{"a request of it still unanswered (the engine may expire it)", []step{produce, func(r *chkRun) {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 6})
		}, queued, rowAgain}, false},
		{"a request answered before the 2xx does not excuse", []step{produce, func(r *chkRun) {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 6})
			r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "timeout", Request: 6})
		}, queued, rowAgain}, true},
		{"a row another node inserted since", []step{produce, queued, func(r *chkRun) {
			r.at(40 * time.Second).add(Observation{Kind: ObsEnqueued, Node: "n2", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		}, func(r *chkRun) { r.at(time.Minute).send("b1", "e1", chkP(1, 0), 1) }}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
			for _, s := range tc.steps {
				s(r)
			}
			var got []Violation
			for _, v := range chkCheck(t, r, CheckFinal{}, chkParams()) {
				if v.Invariant == InvResendWithCause {
					got = append(got, v)
				}
			}
			if tc.bad != (len(got) > 0) {
				t.Fatalf("want a violation: %v; got %v", tc.bad, got)
			}
		})
	}
}

// retry-backoff, rowless half: a node told the failure of a send made with
// no row waits at least InitialBackoff by its clock before sending the
// message again, unless a cause excuses it.
func TestCheckRetryBackoffRowless(t *testing.T) {
	mk := func(after time.Duration, between func(r *chkRun)) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true).at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1, Clock: r.now})
		r.at(2 * time.Second)
		r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "status", Status: 500, Request: 1})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "status", Status: 500, Request: 1, Clock: r.now})
		if between != nil {
			between(r)
		}
		r.at(2*time.Second + after)
		r.enqueue("b1", "e1")
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 2, Clock: r.now})
		return r
	}
	p := chkParams()
	p.InitialBackoff = time.Second
	count := func(r *chkRun) int {
		n := 0
		for _, v := range chkCheck(t, r, CheckFinal{}, p) {
			if v.Invariant == InvRetryBackoff {
				n++
			}
		}
		return n
	}
	if n := count(mk(100*time.Millisecond, nil)); n != 1 {
		t.Errorf("sent again 100ms after the failure (InitialBackoff 1s): %d violations, want 1", n)
	}
	if n := count(mk(1500*time.Millisecond, nil)); n != 0 {
		t.Errorf("sent again 1.5s after the failure (InitialBackoff 1s): %d violations, want 0", n)
	}
	if n := count(mk(100*time.Millisecond, func(r *chkRun) { r.arrive("e1") })); n != 0 {
		t.Errorf("a fresh arrival sent 100ms after the failure: %d violations, want 0", n)
	}
	if n := count(mk(100*time.Millisecond, func(r *chkRun) {
		r.add(Observation{Kind: ObsEnqueued, Node: "n2", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
	})); n != 0 {
		t.Errorf("another node's row sent 100ms after the failure: %d violations, want 0", n)
	}
}

// bounded-retry, rowless half: a node told the failure of a send made with
// no row, that then inserts the message's row itself, counts the failure on
// it before anyone claims it.
func TestCheckBoundedRetryRowlessRecord(t *testing.T) {
	type step func(r *chkRun)
	claim := func(attempts int) step {
		return func(r *chkRun) {
			r.at(time.Minute).add(Observation{Kind: ObsClaimed, Node: "n2", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: attempts}}})
		}
	}
	failed := func(r *chkRun) {
		r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: r.now.Add(time.Second)}}})
	}
	cases := []struct {
		name  string
		steps []step
		bad   bool
	}{
		{"claimed with the failure counted", []step{failed, claim(1)}, false},
		{"claimed with Attempts 0 (the Fail never came)", []step{claim(0)}, true},
		{"a store fault since", []step{func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Fail"})
		}, claim(0)}, false},
		{"the node crashed since", []step{func(r *chkRun) {
			r.add(Observation{Kind: ObsNodeDown, Node: "n1"})
		}, claim(0)}, false},
		{"a requeue starts a new count", []step{failed, func(r *chkRun) {
			r.add(Observation{Kind: ObsRequeued, Node: "n1", Bot: "b1", EventID: "e1"})
		}, claim(0)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
			r.add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: chkEpoch})
			r.member("s1", "b1", impl.Position{}, true).at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1, Clock: r.now})
			r.at(2 * time.Second)
			r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "refused", Request: 1})
			r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Outcome: "refused", Request: 1, Clock: r.now})
			r.add(Observation{Kind: ObsEnqueued, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
			for _, s := range tc.steps {
				s(r)
			}
			var got []Violation
			for _, v := range chkCheck(t, r, CheckFinal{}, chkParams()) {
				if v.Invariant == InvBoundedRetry {
					got = append(got, v)
				}
			}
			if tc.bad != (len(got) > 0) {
				t.Fatalf("want a violation: %v; got %v", tc.bad, got)
			}
		})
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// retry-backoff numbers a failure by the attempt its send made as the
// store implies it: a send from a claimed row is the row's count + 1, a
// direct send (no row) is attempt 1, even when the node claimed the row
// in the same step before sending the direct copy (seeds 120637, 125315).
func TestCheckBackoffOfADirectSendBesideAClaim(t *testing.T) {
	run := func(direct bool) []Violation {
		p := chkParams()
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Minute).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.add(Observation{Kind: ObsClaimed, Node: "n1", Clock: r.now, Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1}}})
		r.step-- // the sends are in the claim's step
		send := func(req int64, direct bool) {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req, Direct: direct, Clock: r.now})
			r.step--
		}
		send(1, direct) // the fresh arrival's copy, sent first
		send(2, false)  // from the claimed row: attempt 2
		r.step++
		r.at(time.Minute + time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "ok", Status: 200})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "ok", Status: 200, OK: true, Clock: r.now})
		r.ack("b1", "e1")
		told := chkEpoch.Add(time.Minute + 2*time.Second)
		r.at(time.Minute + 2*time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "timeout"})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "timeout", Clock: told})
		r.step-- // recorded in the step that told it, on a new row, as attempt 1
		r.enqueue("b1", "e1")
		r.step--
		r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: told.Add(p.InitialBackoff + 100*time.Millisecond)}}})
		r.at(time.Minute+4*time.Second).send("b1", "e1", chkP(1, 0), 2).handle("b1", "e1").ack("b1", "e1")
		r.at(time.Hour).add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	if n := chkCount(run(true), InvRetryBackoff, "below the backoff"); n != 0 {
		t.Errorf("the direct copy's failure recorded with attempt 1's backoff: %d violations, want 0", n)
	}
	// Were the first send the claimed row's, its failure is failure 2, and
	// attempt 1's backoff is short.
	if n := chkCount(run(false), InvRetryBackoff, "below the backoff"); n != 1 {
		t.Errorf("the claimed copy's failure recorded with attempt 1's backoff: %d violations, want 1", n)
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// bounded-retry: a node whose clock runs ahead by more than a lease claims
// a row whose lease, by the true time, still runs, and sends the message
// once more while the holder, told a 2xx, has not yet acked it (it may
// wait AckDelay). The holder's send is superseded by the claim, as a send
// whose outcome its node never learned is (seed 151950). A claim after the
// holder's lease ran out in true time still earns nothing: the holder had
// its whole lease to record what it was told.
func TestCheckBoundedRetryClaimByASkewedClock(t *testing.T) {
	p := chkParams()
	p.MaxAttempts = 2
	run := func(claimAfter time.Duration) []Violation {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: chkEpoch.Add(time.Hour)})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Minute).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		send := func(node string, req int64, attempts int, clock time.Time) {
			r.add(Observation{Kind: ObsClaimed, Node: node, Clock: clock, Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: attempts}}})
			r.step-- // the send is in the claim's step
			r.add(Observation{Kind: ObsSend, Node: node, Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req, Clock: clock})
		}
		// n1: attempt 1 fails with a 503 and is recorded; attempt 2 is
		// answered 2xx, and n1 has not acked it yet.
		send("n1", 1, 0, r.now)
		r.at(time.Minute + time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "status", Status: 503})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "status", Status: 503, Clock: r.now})
		r.step--
		r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: r.now.Add(p.InitialBackoff + 100*time.Millisecond)}}})
		r.at(time.Minute + 3*time.Second)
		send("n1", 2, 1, r.now)
		r.at(time.Minute+4*time.Second).handle("b1", "e1")
		r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "ok", Status: 200})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "ok", Status: 200, OK: true, Clock: r.now})
		// n2, an hour ahead, sees the lease over and sends it a third time.
		r.at(time.Minute + 3*time.Second + claimAfter)
		send("n2", 3, 1, r.now.Add(time.Hour))
		r.at(time.Minute + 4*time.Second + claimAfter).add(Observation{Kind: ObsWire, Node: "n2", Bot: "b1", EventID: "e1", Request: 3, Outcome: "ok", Status: 200})
		r.add(Observation{Kind: ObsResult, Node: "n2", Bot: "b1", EventID: "e1", Request: 3, Outcome: "ok", Status: 200, OK: true, Clock: r.now.Add(time.Hour)})
		r.add(Observation{Kind: ObsAcked, Node: "n2", Keys: []impl.MessageKey{{Subscriber: "b1", EventID: "e1"}}})
		r.at(time.Hour).add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	const phrase = "exceed MaxAttempts"
	if n := chkCount(run(2*time.Second), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("claimed within the holder's lease, by a clock ahead: %d violations, want 0", n)
	}
	if n := chkCount(run(p.Lease+time.Second), InvBoundedRetry, phrase); n != 1 {
		t.Errorf("claimed after the holder's lease ran out with its 2xx unrecorded: %d violations, want 1", n)
	}
}

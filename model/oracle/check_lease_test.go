package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

func chkCount(vs []Violation, inv, phrase string) int {
	n := 0
	for _, v := range vs {
		if v.Invariant == inv && strings.Contains(v.Detail, phrase) {
			n++
		}
	}
	return n
}

// leaseWorld is two nodes up and bot b1's message of event e1 queued;
// claim has node claim it at at and send it as request req in the same
// step.
func leaseWorld() (*chkRun, func(node string, at time.Duration, req int64)) {
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1"}).add(Observation{Kind: ObsNodeUp, Node: "n2"})
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	return r, func(node string, at time.Duration, req int64) {
		r.at(at)
		r.add(Observation{Kind: ObsClaimed, Node: node, Clock: chkEpoch.Add(at), Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		r.step-- // the send is in the claim's step
		r.add(Observation{Kind: ObsSend, Node: node, Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req})
	}
}

// Two nodes with one message in flight at once: the second claim must come
// after the first lease (counted from its grant by the store's clock) ran
// out, or the first request must have ended on the wire.
func TestCheckSecondLeaseWhileInFlight(t *testing.T) {
	p := chkParams()
	p.Lease = 30 * time.Second
	run := func(second time.Duration, firstEnds bool, late ...time.Duration) []Violation {
		r, claim := leaseWorld()
		claim("n1", 2*time.Second, 1)
		if firstEnds {
			r.at(3 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "timeout"})
		}
		if len(late) > 0 {
			// webhook-late: its node is told nothing by the timeout, and
			// the request stays on the wire until the bot answers.
			r.at(4 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: OutcomeLost, Late: true})
		}
		answer := func() {
			r.at(late[0]).add(Observation{Kind: ObsLateAnswer, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "ok", OK: true, Status: 200})
		}
		if len(late) > 0 && late[0] < second {
			answer()
		}
		claim("n2", second, 2)
		if len(late) > 0 && late[0] >= second {
			answer()
		}
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	phrase := "had not run out by the store's clock"
	if n := chkCount(run(10*time.Second, false), InvBoundedRetry, phrase); n != 1 {
		t.Errorf("second claim 8s into a 30s lease, first request in flight: %d violations, want 1", n)
	}
	if n := chkCount(run(33*time.Second, false), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("second claim after the lease ran out (a hung request): %d violations, want 0", n)
	}
	if n := chkCount(run(10*time.Second, true), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("first request ended before the second claim: %d violations, want 0", n)
	}
	// A hung request is recorded lost at the timeout but is still in
	// flight until its late answer.
	if n := chkCount(run(10*time.Second, false, 20*time.Second), InvBoundedRetry, phrase); n != 1 {
		t.Errorf("second claim 8s into a 30s lease, first request hung until 20s: %d violations, want 1", n)
	}
	if n := chkCount(run(10*time.Second, false, 5*time.Second), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("first request answered late at 5s, before the second claim: %d violations, want 0", n)
	}
	if n := chkCount(run(33*time.Second, false, 40*time.Second), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("second claim after the lease ran out, first request still hung: %d violations, want 0", n)
	}
}

// A message due when a node lists the queue after booting is sent within
// the store-retry interval and the head-of-line bound.
func TestCheckDueAtBootIsSent(t *testing.T) {
	p := chkParams()
	p.StoreRetry, p.HOLBound = time.Second, time.Minute
	run := func(sendAt time.Duration, crash bool) []Violation {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(2 * time.Second).add(Observation{Kind: ObsQueueRead, Node: "n1", Clock: chkEpoch.Add(2 * time.Second),
			Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", NextAttemptAt: chkEpoch.Add(time.Second)}}})
		if crash {
			r.at(10 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"})
		}
		if sendAt > 0 {
			r.at(sendAt).send("b1", "e1", chkP(1, 0), 1)
		}
		r.at(10 * time.Minute).add(Observation{Kind: ObsHeal})
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	phrase := "listed the queue after booting"
	if n := chkCount(run(0, false), InvRetryBackoff, phrase); n != 1 {
		t.Errorf("never sent: %d violations, want 1", n)
	}
	if n := chkCount(run(30*time.Second, false), InvRetryBackoff, phrase); n != 0 {
		t.Errorf("sent in time: %d violations, want 0", n)
	}
	if n := chkCount(run(0, true), InvRetryBackoff, phrase); n != 0 {
		t.Errorf("its node crashed: %d violations, want 0", n)
	}
}

// A request whose node crashed no longer holds its message once a Fail
// releases the lease (the node's next incarnation records a failure on
// the row under the same owner name); a live node's request still does.
func TestCheckOrphanedLeaseReleased(t *testing.T) {
	p := chkParams()
	p.Lease = 30 * time.Second
	run := func(crash, fail bool) []Violation {
		r, claim := leaseWorld()
		claim("n1", 2*time.Second, 1)
		r.at(4 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: OutcomeLost, Late: true})
		if crash {
			r.at(5 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"}).add(Observation{Kind: ObsNodeUp, Node: "n1"})
		}
		if fail {
			r.at(6 * time.Second).add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1",
				Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: chkEpoch.Add(7 * time.Second)}}})
		}
		claim("n2", 10*time.Second, 2)
		r.at(60 * time.Second).add(Observation{Kind: ObsLateAnswer, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "ok", OK: true, Status: 200})
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	phrase := "had not run out by the store's clock"
	if n := chkCount(run(true, true), InvBoundedRetry, phrase); n != 0 {
		t.Errorf("crashed sender, lease released by a Fail: %d violations, want 0", n)
	}
	if n := chkCount(run(true, false), InvBoundedRetry, phrase); n != 1 {
		t.Errorf("crashed sender, lease not released: %d violations, want 1", n)
	}
	if n := chkCount(run(false, true), InvBoundedRetry, phrase); n != 1 {
		t.Errorf("live sender released the lease of its request in flight: %d violations, want 1", n)
	}
}

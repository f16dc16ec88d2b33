package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A request whose outcome its node is never told (OutcomeLost): the engine
// must give up on it by itself and send the message again within a lease,
// a cleanup interval and the promptness window.
func TestCheckLostRequestIsSentAgain(t *testing.T) {
	p := chkParams()
	p.MaxBackoff, p.JitterFraction, p.HOLBound = 10*time.Second, 0, time.Minute
	window := p.Lease + p.CleanupInterval + p.MaxBackoff + p.HOLBound + 10*time.Second
	lost := func(r *chkRun, req int64, direct bool) *chkRun {
		return r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: req, Outcome: OutcomeLost, Direct: direct})
	}
	// direct: a send with no row; queued: a send from a live row.
	base := func(direct bool) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
		if !direct {
			r.enqueue("b1", "e1")
		}
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
		return lost(r.at(3*time.Second), 1, direct)
	}
	later := func(r *chkRun, d time.Duration) *chkRun {
		return r.at(3*time.Second + d).add(Observation{Kind: ObsHeal})
	}
	count := func(r *chkRun) int {
		n := 0
		for _, v := range chkCheck(t, r, CheckFinal{}, p) {
			if v.Invariant == InvRetryBackoff {
				n++
			}
		}
		return n
	}
	for _, direct := range []bool{true, false} {
		if n := count(later(base(direct), window+time.Second)); n != 1 {
			t.Errorf("direct=%v: never sent again: %d violations, want 1", direct, n)
		}
		if n := count(later(base(direct), window-time.Second)); n != 0 {
			t.Errorf("direct=%v: the window not over yet: %d violations, want 0", direct, n)
		}
		r := base(direct)
		r.at(4 * time.Minute).add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 2})
		if n := count(later(r, window+time.Second)); n != 0 {
			t.Errorf("direct=%v: sent again in time: %d violations, want 0", direct, n)
		}
		r = base(direct)
		r.at(time.Minute).add(Observation{Kind: ObsNodeDown, Node: "n1"})
		if n := count(later(r, window+time.Second)); n != 0 {
			t.Errorf("direct=%v: its node crashed: %d violations, want 0", direct, n)
		}
	}
	// A row acked (by another request) before the request was lost owes
	// nothing more.
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
	r.handle("b1", "e1").ok("b1", "e1").ack("b1", "e1")
	lost(r.at(3*time.Second), 1, false)
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("its row was acked first: %d violations, want 0", n)
	}
}

// A lost request is a failure as far as the engine could tell: an engine
// that records it as a failed attempt (an expired direct send) earns its
// dead letter. For a snapshot change it is not a failure answered under the
// change's id: the engine may send it again without counting an attempt.
func TestCheckLostCountsAsAFailure(t *testing.T) {
	p := chkParams()
	p.MaxAttempts = 2
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
	for i := int64(1); i <= 2; i++ {
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: i})
		r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: i, Outcome: OutcomeLost, Direct: true})
	}
	r.enqueue("b1", "e1")
	r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e1"})
	for _, v := range chkCheck(t, r, CheckFinal{}, p) {
		if v.Invariant == InvDeadLetterEarned {
			t.Errorf("two lost requests did not earn the dead letter: %v", v)
		}
	}

	c := newChecker(p)
	for i := int64(1); i <= 3; i++ {
		c.observe(&Observation{Kind: ObsWire, Bot: "b1", EventID: "x#1", Request: i, Outcome: OutcomeLost, Snapshot: true})
	}
	if n := c.snapFails[c.key("b1", "x#1")]; n != 0 {
		t.Errorf("lost snapshot requests counted as %d failures of the change, want 0", n)
	}
}

// breaker-policy: a half-open probe that will never be answered stops
// holding the probe slot a lease after it was sent.
func TestCheckBreakerLostProbe(t *testing.T) {
	p := chkParams()
	p.BreakerFailures, p.BreakerOpenFor, p.BreakerCloseAfter = 1, time.Minute, 1
	run := func(second time.Duration) []Violation {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").produce("s1", "e2", chkP(2, 0)).arrive("e2")
		send := func(id string, req int64) {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: id, Stream: "s1", Pos: chkP(req, 0), Payload: []byte("payload-" + id), Request: req, Clock: r.now})
		}
		send("e1", 1)
		r.at(2 * time.Second).add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Clock: r.now})
		r.at(2 * time.Minute)
		send("e2", 2) // the half-open probe
		r.at(2*time.Minute + 2*time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e2", Request: 2, Outcome: OutcomeLost})
		r.at(2*time.Minute + second)
		send("e2", 3)
		return chkCheck(t, r, CheckFinal{}, p)
	}
	has := func(vs []Violation) bool {
		for _, v := range vs {
			if v.Invariant == InvBreakerPolicy {
				return true
			}
		}
		return false
	}
	if !has(run(10 * time.Second)) {
		t.Error("a second request 10s after a lost half-open probe passed")
	}
	if has(run(p.Lease + time.Second)) {
		t.Error("a second request a lease after a lost half-open probe was reported")
	}
}

// retention-bounds: a row written for a message its node had sent with no
// row dates from that send.
func TestCheckRetentionDatesADirectRowFromItsSend(t *testing.T) {
	p := chkParams()
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
	r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
	r.at(5*time.Minute).enqueue("b1", "e1")
	now := chkEpoch.Add(time.Second + p.RetentionTTL + time.Second)
	r.at(now.Sub(chkEpoch)).add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now,
		Deleted: []impl.Message{{Subscriber: "b1", EventID: "e1", CreatedAt: chkEpoch.Add(time.Second)}}})
	for _, v := range chkCheck(t, r, CheckFinal{}, p) {
		if v.Invariant == InvRetentionBounds {
			t.Errorf("a row dated from its direct send, deleted a TTL after it: %v", v)
		}
	}
}

// A lost request sent from a row is no failure: the engine lets the row's
// lease lapse and claims it again without recording an attempt, so a dead
// letter after two of them is unearned.
func TestCheckLostFromARowIsNoFailure(t *testing.T) {
	p := chkParams()
	p.MaxAttempts = 2
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	for i := int64(1); i <= 2; i++ {
		r.add(Observation{Kind: ObsClaimed, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: i})
		r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: i, Outcome: OutcomeLost})
	}
	r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e1"})
	n := 0
	for _, v := range chkCheck(t, r, CheckFinal{}, p) {
		if v.Invariant == InvDeadLetterEarned {
			n++
		}
	}
	if n != 1 {
		t.Errorf("dead after two lost requests from its row: %d dead-letter-earned violations, want 1", n)
	}
}

// A Fail by a node that gave up on a direct request of the message (due at
// once) is not timed from a failure it was told of earlier.
func TestCheckLostDirectFailIsNotTimedFromAToldFailure(t *testing.T) {
	p := chkParams()
	p.MaxBackoff, p.JitterFraction = 10*time.Second, 0
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
	send := func(req int64) {
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req, Clock: r.now})
	}
	send(1)
	r.at(3 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: OutcomeLost, Direct: true})
	send(2)
	r.at(5 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "timeout"})
	r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 2, Outcome: "timeout", Clock: r.now})
	r.at(40*time.Second).enqueue("b1", "e1")
	r.add(Observation{Kind: ObsFailed, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: r.now}}})
	for _, v := range chkCheck(t, r, CheckFinal{}, p) {
		if v.Invariant == InvRetryBackoff && v.Time.Equal(r.now) {
			t.Errorf("an expired direct send's Fail was timed from a told failure: %v", v)
		}
	}
}

// A lost direct request is recorded by its node when it gives up on it,
// on whatever row the message has then: a dead letter, a requeue and a
// delivery that closed the lifetime it was sent in meanwhile do not make
// it any less a failure of the lifetime that records it (seed 34 with the
// backlog fix). Without the lost request the same dead letter is unearned.
func TestCheckLostDirectRequestCountsWhereItIsRecorded(t *testing.T) {
	p := chkParams()
	p.MaxAttempts = 2
	run := func(lostFirst bool) []Violation {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"}).add(Observation{Kind: ObsNodeUp, Node: "n2"})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1")
		if lostFirst {
			r.add(Observation{Kind: ObsSend, Node: "n2", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
			r.add(Observation{Kind: ObsWire, Node: "n2", Bot: "b1", EventID: "e1", Request: 1, Outcome: OutcomeLost, Direct: true})
		}
		// n1 fails it twice from a row (dead), the operator requeues it
		// (a new lifetime), and n1 delivers it: that lifetime ends with
		// the ack.
		r.at(2*time.Second).enqueue("b1", "e1")
		for req := int64(2); req <= 3; req++ {
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req})
			r.add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: req, Outcome: "refused"})
			r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: req, Outcome: "refused", Clock: r.now})
		}
		r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e1"})
		r.at(10 * time.Second).add(Observation{Kind: ObsRequeued, Bot: "b1", EventID: "e1"})
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 4})
		r.handle("b1", "e1").ok("b1", "e1").ack("b1", "e1")
		// n2 writes a new row for what it gave up on, sends it once more,
		// the bot refuses, and the Fail makes it dead at MaxAttempts 2.
		r.at(time.Minute).add(Observation{Kind: ObsEnqueued, Node: "n2", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1}}})
		r.add(Observation{Kind: ObsSend, Node: "n2", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 5})
		r.add(Observation{Kind: ObsWire, Node: "n2", Bot: "b1", EventID: "e1", Request: 5, Outcome: "refused"})
		r.add(Observation{Kind: ObsResult, Node: "n2", Bot: "b1", EventID: "e1", Request: 5, Outcome: "refused", Clock: r.now})
		r.add(Observation{Kind: ObsDead, Node: "n2", Bot: "b1", EventID: "e1"})
		var out []Violation
		for _, v := range chkCheck(t, r, CheckFinal{}, p) {
			if v.Invariant == InvDeadLetterEarned {
				out = append(out, v)
			}
		}
		return out
	}
	if vs := run(true); len(vs) != 0 {
		t.Errorf("the lost direct request and the refusal earned it: %v", vs)
	}
	if vs := run(false); len(vs) != 1 {
		t.Errorf("one refusal alone: %d dead-letter-earned violations, want 1", len(vs))
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// retry-backoff, upper side: a failed (or requeued) message whose row is
// live must be sent again by the failure plus the longest backoff, the
// head-of-line bound and the clock spread; each excuse in turn.
func TestCheckRetryPromptness(t *testing.T) {
	p := chkParams()
	p.MaxBackoff, p.JitterFraction, p.HOLBound, p.BreakerFailures = 10*time.Second, 0, time.Minute, 3
	window := p.MaxBackoff + p.HOLBound + 10*time.Second
	fail := func(r *chkRun, id string) {
		r.add(Observation{Kind: ObsFailed, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: id, NextAttemptAt: r.now.Add(5 * time.Second)}}})
	}
	base := func() *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(2 * time.Second)
		fail(r, "e1")
		return r
	}
	later := func(r *chkRun, d time.Duration) *chkRun {
		return r.at(2*time.Second + d).add(Observation{Kind: ObsHeal})
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
	if n := count(later(base(), window+time.Second)); n != 1 {
		t.Errorf("no retry within the window: %d violations, want 1", n)
	}
	if n := count(later(base(), window-time.Second)); n != 0 {
		t.Errorf("the window not over yet: %d violations, want 0", n)
	}
	r := base()
	r.at(20*time.Second).send("b1", "e1", chkP(1, 0), 2)
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("retried in time: %d violations, want 0", n)
	}
	r = base()
	r.at(20 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"})
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("a crash in the window: %d violations, want 0", n)
	}
	r = base()
	r.add(Observation{Kind: ObsStoreFault, Node: "n2", Method: "Claim"})
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("a store fault in the window: %d violations, want 0", n)
	}
	r = base()
	for i := 0; i < 3; i++ {
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: int64(10 + i)})
	}
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("a run of bot failures (a breaker may be open): %d violations, want 0", n)
	}
	// An older row of the bot is served first.
	r = newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e0", chkP(1, 0)).arrive("e0").enqueue("b1", "e0")
	r.produce("s1", "e1", chkP(2, 0)).arrive("e1").at(1500*time.Millisecond).enqueue("b1", "e1")
	r.at(2 * time.Second)
	fail(r, "e1")
	if n := count(later(r, window+time.Second)); n != 0 {
		t.Errorf("an older row waits first: %d violations, want 0", n)
	}
	// A requeued dead letter is due at once.
	r = newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	r.at(2 * time.Second).add(Observation{Kind: ObsRequeued, Node: "n1", Bot: "b1", EventID: "e1"})
	if n := count(later(r, window+time.Second)); n != 1 {
		t.Errorf("a requeued message never sent: %d violations, want 1", n)
	}
	// The operator asks to requeue a dead letter: it must be live again
	// within the window.
	asked := func(requeue bool) *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Dead: true}}})
		r.at(2 * time.Second).add(Observation{Kind: ObsRequeueAsked, Node: "n1", Bot: "b1", EventID: "e1"})
		if requeue {
			r.add(Observation{Kind: ObsRequeued, Node: "n1", Bot: "b1", EventID: "e1"})
			r.send("b1", "e1", chkP(1, 0), 1)
		}
		return later(r, window+time.Second)
	}
	if n := count(asked(false)); n != 1 {
		t.Errorf("a requeue request ignored: %d violations, want 1", n)
	}
	if n := count(asked(true)); n != 0 {
		t.Errorf("a requeue request carried out: %d violations, want 0", n)
	}
	// Every request slot of a node for the bot held by requests still
	// unanswered: the window grows by a lease and a cleanup interval.
	held := func(wait time.Duration) *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second)
		for i := 0; i < p.MaxInFlightPerBot; i++ {
			id := "h" + string(rune('a'+i))
			r.produce("s1", id, chkP(int64(10+i), 0)).arrive(id)
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: id, Stream: "s1", Pos: chkP(int64(10+i), 0), Payload: []byte("payload-" + id), Request: int64(100 + i)})
		}
		r.produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(2 * time.Second)
		fail(r, "e1")
		return later(r, wait)
	}
	if n := count(held(window + time.Second)); n != 0 {
		t.Errorf("every slot held by unanswered requests: %d violations within the longer window, want 0", n)
	}
	if n := count(held(window + p.Lease + p.CleanupInterval + time.Second)); n != 1 {
		t.Errorf("every slot held, and past the longer window: %d violations, want 1", n)
	}
	// The slots fill up after the failure, while the retry waits for its
	// backoff (seed 173985), or hold a request whose message was sent
	// again since, which the engine may keep until it gives it up (seed
	// 70885): the window grows the same way.
	heldAfter := func(wait time.Duration, resent bool) *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(2 * time.Second)
		fail(r, "e1")
		r.at(3 * time.Second)
		for i := 0; i < p.MaxInFlightPerBot; i++ {
			id := "h" + string(rune('a'+i))
			if resent && i == p.MaxInFlightPerBot-1 {
				id = "ha"
			} else {
				r.produce("s1", id, chkP(int64(10+i), 0)).arrive(id)
			}
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: id, Stream: "s1", Pos: chkP(int64(10+i), 0), Payload: []byte("payload-" + id), Request: int64(100 + i)})
		}
		return r.at(2*time.Second + wait).add(Observation{Kind: ObsHeal})
	}
	for _, resent := range []bool{false, true} {
		if n := count(heldAfter(window+time.Second, resent)); n != 0 {
			t.Errorf("every slot taken after the failure (one request's message sent again: %v): %d violations within the longer window, want 0", resent, n)
		}
		if n := count(heldAfter(window+p.Lease+p.CleanupInterval+time.Second, resent)); n != 1 {
			t.Errorf("every slot taken after the failure (one request's message sent again: %v), and past the longer window: %d violations, want 1", resent, n)
		}
	}
	if n := count(later(base(), window+time.Second)); n != 1 {
		t.Errorf("no retry within the window, slots free: %d violations, want 1", n)
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A join that starts behind the head (a backfilling join) owes its bot
// events that reached a node, and were passed by the cursor, before the
// join: the cursor that passed them was no lie then (cursor-low-watermark
// exempts them), and their delivery is timed from the join
// (no-head-of-line-blocking); the same delay for an event that arrived
// after the join is still a violation, and so is never delivering a
// backfilled event (no-silent-loss).
func TestCheckBackfillingJoin(t *testing.T) {
	mk := func(arriveAfterJoin, deliver bool) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").deliver("b1", "e1", chkP(1, 0)).cursor("s1", chkP(1, 0))
		r.at(2*time.Second).produce("s1", "e2", chkP(1, 1))
		if !arriveAfterJoin {
			r.arrive("e2").deliver("b1", "e2", chkP(1, 1)).cursor("s1", chkP(1, 1))
		}
		r.at(10*time.Minute).member("s1", "b2", chkP(1, 0), true)
		if arriveAfterJoin {
			r.arrive("e2").deliver("b1", "e2", chkP(1, 1))
		}
		if deliver {
			r.at(10*time.Minute+30*time.Second).deliver("b2", "e2", chkP(1, 1))
		}
		if arriveAfterJoin {
			r.cursor("s1", chkP(1, 1))
		}
		r.at(11 * time.Minute).add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return r
	}
	p := chkParams()
	p.CleanupInterval = 0
	p.HealthyBots = []string{"b1", "b2"}
	if vs := chkCheck(t, mk(false, true), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("a backfilled obligation was judged as an old one: %v", vs)
	}
	chkWantOnly(t, chkCheck(t, mk(false, false), CheckFinal{}, p), InvNoSilentLoss)
	// Arriving only after the join, the event was owed to b2 from its
	// arrival: the cursor passed it before b2's copy was queued.
	r := mk(true, false)
	vs := chkCheck(t, r, CheckFinal{}, p)
	found := false
	for _, v := range vs {
		found = found || v.Invariant == InvCursorLowWatermark
	}
	if !found {
		t.Fatalf("a cursor past an obligation made before it was not flagged: %v", vs)
	}
}

package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A planted bug of the class acked-after-delivery closes: an engine that
// forgets the ack of a delivered message (the deferred-ack path losing its
// keys, say). The bot handled the event, so every other invariant passes;
// only the row left in the store at the end, long after its 2xx reached
// the node, shows it.
func TestCheckAckedAfterDelivery(t *testing.T) {
	p := chkParams()
	row := impl.Message{Subscriber: "b1", EventID: "e1", LeaseOwner: "n1", Attempts: 0}
	mk := func(end time.Duration, reenqueue, acked bool) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1").
			send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1").ok("b1", "e1").cursor("s1", chkP(1, 0))
		if acked {
			r.ack("b1", "e1")
		}
		r.at(time.Minute).add(Observation{Kind: ObsHeal})
		if reenqueue {
			// The upstream replays the event after its delivery: a new
			// row, judged on its own 2xx (none yet).
			r.at(end-time.Minute).enqueue("b1", "e1")
		}
		return r.at(end).add(Observation{Kind: ObsEnd})
	}
	final := CheckFinal{Messages: []impl.Message{row}}
	late := time.Minute + p.LivenessBound/2 + time.Second

	v := chkWantOnly(t, chkCheck(t, mk(late, false, false), final, p), InvAckedAfterDelivery)
	if v.Bot != "b1" || v.Event != "e1" || !strings.Contains(v.Detail, "still a live row") {
		t.Fatalf("violation = %v", v)
	}
	if vs := chkCheck(t, mk(time.Minute+p.LivenessBound/2, false, false), final, p); len(vs) != 0 {
		t.Fatalf("a row within the bound after the heal was reported: %v", vs)
	}
	if vs := chkCheck(t, mk(late, true, false), final, p); len(vs) != 0 {
		t.Fatalf("a row the upstream recreated after the delivery was reported: %v", vs)
	}
	if vs := chkCheck(t, mk(late, false, true), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("an acked delivery was reported: %v", vs)
	}
	dead := row
	dead.Dead = true
	if vs := chkCheck(t, mk(late, false, false), CheckFinal{Messages: []impl.Message{dead}}, p); len(vs) != 0 {
		for _, v := range vs {
			if v.Invariant == InvAckedAfterDelivery {
				t.Fatalf("a dead row was judged: %v", v)
			}
		}
	}
}

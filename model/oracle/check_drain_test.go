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
	// A declared ack delay past the end of the runs below keeps the
	// run-time rule (check_ackprompt.go, tested on its own) out of these.
	p.AckDelay = p.LivenessBound
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

// A planted bug of the class the run-time rule closes: an engine whose ack
// of a delivered message waits for some later, unrelated event (the next
// hand-off, the periodic sweep) rather than its declared ack delay. The row
// drains before the end of the run, so the end-of-run rule passes it.
func TestCheckAckDelay(t *testing.T) {
	p := chkParams()
	p.AckDelay = 2 * time.Second
	late := 2*p.AckDelay + AckSlack + time.Millisecond
	type tc struct {
		name string
		mid  func(r *chkRun) // between the 2xx and the late ack
		told time.Duration   // when the node is told of the 2xx, after the send
		// holder creates the row with its leased enqueue (default n1);
		// claimedBy then claims it.
		holder, claimedBy string
		want              bool
	}
	cases := []tc{
		{name: "ack after the deadline", want: true},
		{name: "acked in time", mid: func(r *chkRun) { r.at(time.Second+2*p.AckDelay).ack("b1", "e1") }},
		{name: "node crashed", mid: func(r *chkRun) { r.at(2 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"}) }},
		{name: "node booted", mid: func(r *chkRun) { r.at(2 * time.Second).add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: r.now}) }},
		{name: "store fault told to the node", mid: func(r *chkRun) {
			r.at(2 * time.Second).add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Ack"})
		}},
		{name: "store fault at another node", want: true, mid: func(r *chkRun) {
			r.at(2 * time.Second).add(Observation{Kind: ObsStoreFault, Node: "n2", Method: "Ack"})
		}},
		{name: "requeued", mid: func(r *chkRun) {
			r.at(2 * time.Second).add(Observation{Kind: ObsRequeued, Node: "n1", Bot: "b1", EventID: "e1"})
		}},
		{name: "answer a lease after the send", told: p.Lease},
		{name: "a direct send beside another node's row", holder: "n2"},
		{name: "the row claimed by another node", claimedBy: "n2"},
		{name: "the row claimed back by the node", holder: "n2", claimedBy: "n1", want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newChkRun()
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
			r.add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: chkEpoch})
			r.member("s1", "b1", impl.Position{}, true)
			r.at(0).produce("s1", "e1", chkP(1, 0)).arrive("e1")
			holder := "n1"
			if c.holder != "" {
				holder = c.holder
			}
			r.add(Observation{Kind: ObsEnqueued, Node: holder, Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", LeaseOwner: holder}}})
			if c.claimedBy != "" {
				r.add(Observation{Kind: ObsClaimed, Node: c.claimedBy, Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
			}
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
			r.handle("b1", "e1")
			r.at(time.Second + c.told).add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", OK: true, Request: 1})
			if c.mid != nil {
				c.mid(r)
			}
			r.at(time.Second+c.told+late).ack("b1", "e1").cursor("s1", chkP(1, 0))
			r.at(time.Hour).add(Observation{Kind: ObsHeal})
			r.add(Observation{Kind: ObsEnd})
			vs := chkCheck(t, r, CheckFinal{}, p)
			var got []Violation
			for _, v := range vs {
				if v.Invariant == InvAckedAfterDelivery {
					got = append(got, v)
				}
			}
			if c.want && (len(got) != 1 || !strings.Contains(got[0].Detail, "still in the queue")) {
				t.Fatalf("want one ack-delay violation, got %v (all: %v)", got, vs)
			}
			if !c.want && len(got) != 0 {
				t.Fatalf("want none, got %v", got)
			}
		})
	}
	// A stale answer: the node sent the message again before it was told
	// of the first request's 2xx (it may have dropped that request).
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	r.member("s1", "b1", impl.Position{}, true)
	r.at(0).produce("s1", "e1", chkP(1, 0)).arrive("e1")
	r.add(Observation{Kind: ObsEnqueued, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", LeaseOwner: "n1"}}})
	for _, req := range []int64{1, 2} {
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: req})
	}
	r.handle("b1", "e1")
	r.at(time.Second).add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", OK: true, Request: 1})
	r.at(time.Second+late).ack("b1", "e1").cursor("s1", chkP(1, 0))
	r.at(time.Hour).add(Observation{Kind: ObsHeal})
	r.add(Observation{Kind: ObsEnd})
	for _, v := range chkCheck(t, r, CheckFinal{}, p) {
		if v.Invariant == InvAckedAfterDelivery {
			t.Fatalf("a stale answer was judged: %v", v)
		}
	}
}

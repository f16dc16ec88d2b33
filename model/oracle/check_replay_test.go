package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// idempotent-replay, durable half: a node that handed an event off in its
// current incarnation and is handed it again must not queue it again nor
// send it again without a row; each exemption in turn.
func TestCheckReplayChangesNoDurableState(t *testing.T) {
	type step func(r *chkRun)
	produce := func(r *chkRun) {
		r.member("s1", "b1", impl.Position{}, true).at(time.Second).produce("s1", "e1", chkP(1, 0))
	}
	queued := func(r *chkRun) { r.arrive("e1").deliver("b1", "e1", chkP(1, 0)) }
	direct := func(r *chkRun) {
		r.arrive("e1")
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 7})
		r.handle("b1", "e1")
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", OK: true, Request: 7})
	}
	again := func(r *chkRun) { r.at(time.Minute).arrive("e1").enqueue("b1", "e1") }
	sendAgain := func(r *chkRun) {
		r.at(time.Minute).arrive("e1")
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 8})
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
		{"queued again after its ack", []step{produce, queued, again}, true},
		{"sent again after a direct 2xx", []step{produce, direct, sendAgain}, true},
		{"queued after a direct 2xx", []step{produce, direct, again}, true},
		{"another incarnation", []step{produce, queued, crash, again}, false},
		{"another node", []step{produce, queued, func(r *chkRun) {
			r.at(time.Minute).add(Observation{Kind: ObsEnqueued, Node: "n2", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		}}, false},
		{"a membership change since", []step{produce, queued, func(r *chkRun) { r.member("s1", "b2", impl.Position{}, true) }, again}, false},
		{"a store fault since", []step{produce, queued, func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Enqueue", Ambiguous: true})
		}, again}, false},
		{"a row claimed from an earlier incarnation is not a hand-off", []step{produce, func(r *chkRun) {
			r.arrive("e1")
			r.add(Observation{Kind: ObsEnqueued, Node: "n1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		}, crash, func(r *chkRun) {
			r.send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1").ok("b1", "e1").ack("b1", "e1")
		}, again}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			for _, s := range tc.steps {
				s(r)
			}
			var got []Violation
			for _, v := range chkCheck(t, r, CheckFinal{}, chkParams()) {
				if v.Invariant == InvIdempotentReplay {
					got = append(got, v)
				}
			}
			if tc.bad != (len(got) > 0) {
				t.Fatalf("want a violation: %v; got %v", tc.bad, got)
			}
		})
	}
}

// On a timestamp stream an engine may forget ids further back than its
// declared lookback behind the newest it handed off; within it, not.
func TestCheckReplayTimestampLookback(t *testing.T) {
	mk := func(oldMs int64) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsMembership, Stream: "t1", Bot: "b1", Member: true})
		r.at(time.Second)
		for _, e := range []struct {
			id string
			ms int64
		}{{"old", oldMs}, {"new", 10_000_000}} {
			r.add(Observation{Kind: ObsProduced, Stream: "t1", EventID: e.id, Pos: impl.Position{Major: e.ms, ID: e.id}, Payload: []byte("p")})
			r.add(Observation{Kind: ObsArrived, Node: "n1", EventID: e.id})
			r.enqueue("b1", e.id).ack("b1", e.id)
		}
		r.at(time.Minute).enqueue("b1", "old")
		return r
	}
	p := chkParams()
	p.TimestampLookback = time.Minute
	count := func(r *chkRun) int {
		n := 0
		for _, v := range chkCheck(t, r, CheckFinal{}, p) {
			if v.Invariant == InvIdempotentReplay {
				n++
			}
		}
		return n
	}
	if n := count(mk(10_000_000 - 30_000)); n != 1 {
		t.Errorf("an id 30s behind the newest (lookback 1m) queued again: %d violations, want 1", n)
	}
	if n := count(mk(10_000_000 - 120_000)); n != 0 {
		t.Errorf("an id 2m behind the newest (lookback 1m) queued again: %d violations, want 0", n)
	}
}

// A planted bug of the class the boot-cursor rule closes: an engine that
// forgets, at boot, that its durable cursor covers everything before it
// (the handed-off mark is not set from the cursor). An upstream that
// replays a little of what came before the cursor then has the event
// queued again: a duplicate for the bot, new durable state from input
// already processed.
func TestCheckReplayBehindBootCursor(t *testing.T) {
	p := chkParams()
	cases := []struct {
		name string
		pre  func(r *chkRun) // before the crash
		mid  func(r *chkRun) // after the boot read
		pos  impl.Position   // the replayed event's
		want bool
	}{
		{name: "at the cursor", pos: chkP(2, 0), want: true},
		{name: "behind the cursor", pos: chkP(1, 0), want: true},
		{name: "after the cursor", pos: chkP(3, 0)},
		{name: "membership changed since the read", pos: chkP(1, 0), mid: func(r *chkRun) { r.member("s1", "b2", chkP(2, 0), true) }},
		{name: "a backfilling join owes it", pos: chkP(2, 0), pre: func(r *chkRun) { r.member("s1", "b1", chkP(1, 0), true) }},
		{name: "another bot's join", pos: chkP(1, 0), want: true, pre: func(r *chkRun) { r.member("s1", "b2", chkP(3, 0), true) }},
		{name: "store fault since the read", pos: chkP(1, 0), mid: func(r *chkRun) {
			r.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "Enqueue"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newChkRun()
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
			r.member("s1", "b1", impl.Position{}, true)
			r.at(time.Second)
			for i, id := range []string{"e1", "e2", "e3"} {
				r.produce("s1", id, chkP(int64(i+1), 0)).arrive(id).deliver("b1", id, chkP(int64(i+1), 0))
			}
			r.cursor("s1", chkP(2, 0))
			if c.pre != nil {
				c.pre(r)
			}
			r.at(time.Minute).add(Observation{Kind: ObsNodeDown, Node: "n1"})
			r.at(2 * time.Minute).add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: r.now})
			r.add(Observation{Kind: ObsCursorsRead, Node: "n1", Cursors: []impl.Cursor{{Key: impl.CursorKey{Stream: "s1"}, Pos: chkP(2, 0)}}})
			if c.mid != nil {
				c.mid(r)
			}
			id := map[int64]string{1: "e1", 2: "e2", 3: "e3"}[c.pos.Major]
			r.arrive(id).enqueue("b1", id)
			r.at(time.Hour).add(Observation{Kind: ObsHeal})
			r.add(Observation{Kind: ObsEnd})
			var got []Violation
			for _, v := range chkCheck(t, r, CheckFinal{Messages: []impl.Message{{Subscriber: "b1", EventID: id}}}, p) {
				if v.Invariant == InvIdempotentReplay {
					got = append(got, v)
				}
			}
			if c.want && (len(got) != 1 || !strings.Contains(got[0].Detail, "read at boot")) {
				t.Fatalf("want one boot-cursor replay, got %v", got)
			}
			if !c.want && len(got) != 0 {
				t.Fatalf("want none, got %v", got)
			}
		})
	}
}

// A late join: a bot joins the stream after an event was produced, from a
// position before it, and the node hands the event off (a send with no row,
// answered 2xx) before it has applied the join, then replays it for the new
// member, sending it to the old one again. The sequence is the one a real
// engine produced under deliverysim chaos (seed 11: the join fell in a
// database stall; the replay's arrival is served before the first 2xx is
// answered, as there). The join excuses that one replay for both checks,
// and no more; a join that does not reach back over the event, that came
// before the event, or a leave excuses nothing.
func TestCheckLateJoin(t *testing.T) {
	const bot, ev = "b1", "e1"
	pos := chkP(1, 5)
	req := int64(6)
	send := func(r *chkRun) {
		req++
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: bot, EventID: ev, Stream: "s1", Pos: pos, Payload: []byte("payload-" + ev), Request: req})
	}
	ok := func(r *chkRun) {
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: bot, EventID: ev, OK: true, Request: req})
	}
	type step func(r *chkRun)
	produce := func(r *chkRun) { r.at(time.Second).produce("s1", ev, pos).arrive(ev) }
	join := func(from impl.Position, member bool) step {
		return func(r *chkRun) { r.at(1050*time.Millisecond).member("s1", "b2", from, member) }
	}
	first := func(r *chkRun) {
		r.at(1300 * time.Millisecond)
		send(r)
		r.handle(bot, ev).arrive(ev)
		ok(r)
	}
	again := func(r *chkRun) {
		r.at(1400 * time.Millisecond)
		send(r)
		ok(r)
	}
	cases := []struct {
		name  string
		steps []step
		bad   bool
	}{
		{"a join after the event, from before it, excuses one replay", []step{produce, join(chkP(1, 2), true), first, again}, false},
		{"but not a second one", []step{produce, join(chkP(1, 2), true), first, again, again}, true},
		{"two late joins excuse two", []step{produce, join(chkP(1, 2), true), func(r *chkRun) {
			r.member("s1", "b3", chkP(1, 3), true)
		}, first, again, again}, false},
		{"a join from the event's position on does not", []step{produce, join(pos, true), first, again}, true},
		{"a join before the event was produced does not", []step{join(chkP(1, 2), true), produce, first, again}, true},
		{"a leave does not", []step{produce, join(chkP(1, 2), false), first, again}, true},
		{"a join on another stream does not", []step{produce, func(r *chkRun) {
			r.at(1050*time.Millisecond).member("s2", "b2", impl.Position{}, true)
		}, first, again}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req = 6
			r := newChkRun()
			r.member("s1", bot, impl.Position{}, true)
			for _, s := range tc.steps {
				s(r)
			}
			got := map[string]int{}
			for _, v := range chkCheck(t, r, CheckFinal{}, chkParams()) {
				got[v.Invariant]++
			}
			for _, inv := range []string{InvIdempotentReplay, InvResendWithCause} {
				if tc.bad != (got[inv] > 0) {
					t.Errorf("%s: want a violation: %v; got %d (all: %v)", inv, tc.bad, got[inv], got)
				}
			}
		})
	}
}

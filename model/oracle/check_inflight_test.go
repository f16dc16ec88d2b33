package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A planted bug of the class in-flight-limit closes: an engine whose
// direct hand-off ignores the requests already outstanding to a bot (its
// budget computed from the limit alone). Nothing is lost or late; the bot
// just gets more concurrent requests than the engine promised.
func TestCheckInFlightLimit(t *testing.T) {
	p := chkParams()
	p.MaxInFlightPerBot = 2
	type step struct {
		at   time.Duration
		kind string // "send", "ok", "down", "up"
		node string
		ev   string
		req  int64
	}
	cases := []struct {
		name  string
		steps []step
		want  bool
	}{
		{name: "three unanswered", want: true, steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {0, "send", "n1", "e3", 3}}},
		{name: "one answered first", steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {time.Second, "ok", "n1", "e1", 1}, {time.Second, "send", "n1", "e3", 3}}},
		{name: "sent again replaces the older request", steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {time.Second, "send", "n1", "e1", 3}}},
		{name: "two nodes count apart", steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {0, "send", "n2", "e3", 3}, {0, "send", "n2", "e4", 4}}},
		{name: "a crash forgets the node's requests", steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {time.Second, "down", "n1", "", 0}, {2 * time.Second, "up", "n1", "", 0},
			{2 * time.Second, "send", "n1", "e3", 3}}},
		{name: "a request a lease old stops counting", steps: []step{
			{0, "send", "n1", "e1", 1}, {0, "send", "n1", "e2", 2}, {p.Lease, "send", "n1", "e3", 3}}},
		{name: "unnumbered requests are not judged", steps: []step{
			{0, "send", "n1", "e1", 0}, {0, "send", "n1", "e2", 0}, {0, "send", "n1", "e3", 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newChkRun()
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
			r.add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: chkEpoch})
			r.member("s1", "b1", impl.Position{}, true)
			for i, id := range []string{"e1", "e2", "e3", "e4"} {
				r.produce("s1", id, chkP(int64(i+1), 0)).arrive(id)
			}
			for _, s := range c.steps {
				r.at(time.Second + s.at)
				switch s.kind {
				case "send":
					r.add(Observation{Kind: ObsSend, Node: s.node, Bot: "b1", EventID: s.ev, Stream: "s1", Payload: []byte("payload-" + s.ev), Request: s.req, Clock: r.now})
				case "ok":
					r.add(Observation{Kind: ObsResult, Node: s.node, Bot: "b1", EventID: s.ev, OK: true, Request: s.req, Clock: r.now})
				case "down":
					r.add(Observation{Kind: ObsNodeDown, Node: s.node})
				case "up":
					r.add(Observation{Kind: ObsNodeUp, Node: s.node, Clock: r.now})
				}
			}
			var got []Violation
			for _, v := range chkCheck(t, r, CheckFinal{}, p) {
				if v.Invariant == InvInFlightLimit {
					got = append(got, v)
				}
			}
			if c.want && (len(got) != 1 || !strings.Contains(got[0].Detail, "2 of its requests")) {
				t.Fatalf("want one in-flight-limit violation, got %v", got)
			}
			if !c.want && len(got) != 0 {
				t.Fatalf("want none, got %v", got)
			}
		})
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A node told a status the policy dead-letters at once
// (impl.PermanentStatus) must record the failure dead in the same step; a
// Fail that leaves the row live is an engine retrying what cannot
// succeed (bounded-retry). A transient status left live is the normal
// retry, and a store fault at the Fail excuses it.
func TestCheckPermanentStatusLeftLive(t *testing.T) {
	run := func(status int, dead, storeFault bool) []Violation {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(2 * time.Second).add(Observation{Kind: ObsClaimed, Node: "n1", Clock: chkEpoch.Add(2 * time.Second), Messages: []impl.Message{{Subscriber: "b1", EventID: "e1"}}})
		r.step-- // the send is in the claim's step
		r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("payload-e1"), Request: 1})
		r.at(3 * time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "status", Status: status})
		r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: "e1", Request: 1, Outcome: "status", Status: status})
		if storeFault {
			r.step--
			r.add(Observation{Kind: ObsStoreFault, Node: "n1"})
		}
		r.step-- // recorded in the step that told it
		if dead {
			r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e1"})
		} else {
			r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1, NextAttemptAt: chkEpoch.Add(4 * time.Second)}}})
		}
		r.at(10 * time.Minute).add(Observation{Kind: ObsHeal})
		return chkCheckAll(t, r, CheckFinal{}, chkParams())
	}
	phrase := "which the policy dead-letters at once"
	for _, c := range []struct {
		status      int
		dead, fault bool
		want        int
		what        string
	}{
		{410, false, false, 1, "410 recorded live"},
		{400, false, false, 1, "400 recorded live"},
		{410, true, false, 0, "410 recorded dead"},
		{503, false, false, 0, "503 recorded live (a retry)"},
		{429, false, false, 0, "429 recorded live (a retry)"},
		{410, false, true, 0, "410 recorded live with a store fault at the Fail"},
	} {
		if n := chkCount(run(c.status, c.dead, c.fault), InvBoundedRetry, phrase); n != c.want {
			t.Errorf("%s: %d violations, want %d", c.what, n, c.want)
		}
	}
}

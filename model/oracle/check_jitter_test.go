package oracle

import (
	"fmt"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// retry-backoff's jitter: waits that sit exactly at an end of the jitter
// span, again and again, are an engine that does not draw its jitter; waits
// spread over the span, a policy without jitter, or two coincidences, are
// not.
func TestCheckJitterDrawn(t *testing.T) {
	run := func(fraction float64, jitters ...time.Duration) []Violation {
		p := chkParams()
		p.JitterFraction = fraction
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		r.member("s1", "b1", impl.Position{}, true)
		for i, j := range jitters {
			id := fmt.Sprintf("e%d", i+1)
			at := time.Duration(i+1) * time.Minute
			r.at(at).produce("s1", id, chkP(int64(i+1), 0)).arrive(id).enqueue("b1", id)
			r.add(Observation{Kind: ObsClaimed, Node: "n1", Clock: r.now, Messages: []impl.Message{{Subscriber: "b1", EventID: id}}})
			r.step-- // the send is in the claim's step
			req := int64(i + 1)
			r.add(Observation{Kind: ObsSend, Node: "n1", Bot: "b1", EventID: id, Stream: "s1", Pos: chkP(int64(i+1), 0), Payload: []byte("payload-" + id), Request: req})
			told := chkEpoch.Add(at + time.Second)
			r.at(at + time.Second).add(Observation{Kind: ObsWire, Node: "n1", Bot: "b1", EventID: id, Request: req, Outcome: "status", Status: 503})
			r.add(Observation{Kind: ObsResult, Node: "n1", Bot: "b1", EventID: id, Request: req, Outcome: "status", Status: 503, Clock: told})
			r.step-- // recorded in the step that told it
			next := told.Add(p.InitialBackoff + j)
			r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: id, Messages: []impl.Message{{Subscriber: "b1", EventID: id, Attempts: 1, NextAttemptAt: next}}})
		}
		r.at(time.Hour).add(Observation{Kind: ObsHeal})
		return chkCheckAll(t, r, CheckFinal{}, p)
	}
	const phrase = "the jitter is not drawn"
	top := time.Duration(0.3*float64(time.Second)) - 1 // chkParams' InitialBackoff is 1s
	for _, c := range []struct {
		what     string
		fraction float64
		jitters  []time.Duration
		want     int
	}{
		{"every wait at the bottom", 0.3, []time.Duration{0, 0, 0, 0}, 1},
		{"every wait at the top", 0.3, []time.Duration{top, top, top}, 1},
		{"the ends mixed", 0.3, []time.Duration{0, top, 0}, 1},
		{"two at the bottom, then drawn", 0.3, []time.Duration{0, 0, 123456789, 7654321}, 0},
		{"waits drawn over the span", 0.3, []time.Duration{1, 99999999, 123456789, 250000000}, 0},
		{"no jitter configured", 0, []time.Duration{0, 0, 0, 0}, 0},
	} {
		if n := chkCount(run(c.fraction, c.jitters...), InvRetryBackoff, phrase); n != c.want {
			t.Errorf("%s: %d violations, want %d", c.what, n, c.want)
		}
	}
}

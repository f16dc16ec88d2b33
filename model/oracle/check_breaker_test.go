package oracle

import (
	"testing"
	"time"
)

// brRun drives one node's requests to one bot, by the node's clock (the
// observation times are the same instants).
type brRun struct {
	*chkRun
	req int64
}

func (r *brRun) send(at time.Duration, event string) int64 {
	r.req++
	r.at(at).add(Observation{Kind: ObsSend, Node: "n1", Bot: "b", EventID: event, Request: r.req, Clock: chkEpoch.Add(at)})
	return r.req
}

func (r *brRun) result(at time.Duration, event string, req int64, ok bool) {
	r.at(at).add(Observation{Kind: ObsResult, Node: "n1", Bot: "b", EventID: event, Request: req, OK: ok, Clock: chkEpoch.Add(at)})
}

// fails sends n distinct messages at `at` and has each fail 10ms later.
func (r *brRun) fails(at time.Duration, n int, prefix string) {
	for i := range n {
		ev := prefix + string(rune('a'+i))
		r.result(at+10*time.Millisecond, ev, r.send(at, ev), false)
	}
}

func brViolations(t *testing.T, r *brRun) []Violation {
	t.Helper()
	p := DefaultCheckParams()
	p.BreakerFailures, p.BreakerOpenFor, p.BreakerCloseAfter = 3, time.Minute, 2
	var out []Violation
	for _, v := range chkCheckAll(t, r.chkRun, CheckFinal{}, p) {
		if v.Invariant == InvBreakerPolicy {
			out = append(out, v)
		}
	}
	return out
}

func TestCheckBreakerPolicy(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		run  func(r *brRun)
		want int
	}{
		{"sends while open", func(r *brRun) {
			r.fails(s, 3, "x")
			r.send(30*s, "y") // open until 61s
		}, 1},
		{"two failures do not open", func(r *brRun) {
			r.fails(s, 2, "x")
			r.send(2*s, "y")
		}, 0},
		{"a success resets the count", func(r *brRun) {
			r.fails(s, 2, "x")
			r.result(2*s, "y", r.send(2*s, "y"), true)
			r.fails(3*s, 2, "z")
			r.send(4*s, "w")
		}, 0},
		{"half-open after the open period: one probe", func(r *brRun) {
			r.fails(s, 3, "x")
			r.send(62*s, "y")
		}, 0},
		{"half-open: a second request before the probe's answer", func(r *brRun) {
			r.fails(s, 3, "x")
			r.send(62*s, "y")
			r.send(63*s, "z")
		}, 1},
		{"half-open: closed after two successes", func(r *brRun) {
			r.fails(s, 3, "x")
			r.result(62*s, "y", r.send(62*s, "y"), true)
			r.result(63*s, "z", r.send(63*s, "z"), true)
			r.send(64*s, "u")
			r.send(64*s, "v")
		}, 0},
		{"half-open: a failed probe opens it again", func(r *brRun) {
			r.fails(s, 3, "x")
			r.result(62*s, "y", r.send(62*s, "y"), false)
			r.send(90*s, "z") // open until 122s
		}, 1},
		{"the answer to a resent message is uncertain", func(r *brRun) {
			// The third failure is the first request of a message sent
			// again since: the engine may have dropped it, so whether the
			// breaker opened is not known and nothing is judged.
			r.fails(s, 2, "x")
			first := r.send(s, "y")
			r.send(2*s, "y")
			r.result(3*s, "y", first, false)
			r.send(4*s, "z")
		}, 0},
		{"a restart closes it", func(r *brRun) {
			r.fails(s, 3, "x")
			r.at(2 * s).add(Observation{Kind: ObsNodeDown, Node: "n1"})
			r.at(3 * s).add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch.Add(3 * s)})
			r.send(4*s, "y")
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &brRun{chkRun: newChkRun()}
			tc.run(r)
			if got := brViolations(t, r); len(got) != tc.want {
				t.Fatalf("%d breaker-policy violations, want %d: %v", len(got), tc.want, got)
			}
		})
	}
}

package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// The Standard Webhooks timestamp rule at its edges, on both sides: a
// stamp exactly the tolerance away is accepted, one nanosecond (past) or
// one second (ahead: stamps are whole seconds) more is not.
func TestStampInTolerance(t *testing.T) {
	tol := 5 * time.Minute
	now := chkEpoch.Add(time.Hour) // a whole second
	sec := now.Unix()
	for _, c := range []struct {
		now   time.Time
		stamp int64
		want  bool
	}{
		{now, sec, true},
		{now, sec - 300, true},                       // exactly tol old
		{now.Add(time.Nanosecond), sec - 300, false}, // a nanosecond past it
		{now, sec - 301, false},
		{now, sec + 300, true}, // exactly tol ahead
		{now, sec + 301, false},
		{now.Add(-time.Nanosecond), sec + 300, false}, // a nanosecond more ahead
	} {
		if got := stampInTolerance(c.now, c.stamp, tol); got != c.want {
			t.Errorf("stamp %+d s at now%+v: %v, want %v", c.stamp-sec, c.now.Sub(now), got, c.want)
		}
	}
}

// A receiver that accepts (handles or answers as a duplicate) a request
// stamped outside its tolerance fails signed-requests-verify; so does a
// twin receiver's wrong answer to a stamp probe, either way. The right
// answers pass.
func TestCheckAcceptedStamps(t *testing.T) {
	verify := func(os ...Observation) int {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
		for _, o := range os {
			r.at(time.Hour).add(o)
		}
		n := 0
		for _, v := range Check(r.obs, CheckFinal{}, chkParams()) {
			if v.Invariant == InvSignedVerify {
				n++
			}
		}
		return n
	}
	now := chkEpoch.Add(time.Hour).Unix()
	ahead := now + 301 // a second past the 5-minute tolerance
	if n := verify(Observation{Kind: ObsDuplicate, Bot: "b1", EventID: "e1", Stamp: ahead, Stamped: true}); n != 1 {
		t.Errorf("a duplicate answered for a far-future stamp: %d violations, want 1", n)
	}
	if n := verify(Observation{Kind: ObsDuplicate, Bot: "b1", EventID: "e1", Stamp: now + 300, Stamped: true}); n != 0 {
		t.Errorf("a duplicate answered at the tolerance's edge: %d violations, want 0", n)
	}
	probe := func(stamp int64, ok bool, status int, detail string) Observation {
		return Observation{Kind: ObsStampProbe, Bot: "b1", EventID: "e1", Stamp: stamp, Stamped: true, OK: ok, Status: status, Detail: detail}
	}
	for _, c := range []struct {
		name string
		o    Observation
		want int
	}{
		{"far-future accepted", probe(ahead, true, 200, ""), 1},
		{"stale accepted", probe(now-301, true, 200, ""), 1},
		{"edge refused", probe(now-300, false, 400, "webhook-timestamp too old"), 1},
		{"stale refused for the signature", probe(now-301, false, 401, "no matching webhook-signature"), 1},
		{"far-future refused", probe(ahead, false, 400, "webhook-timestamp too far in the future"), 0},
		{"edge accepted", probe(now+300, true, 200, ""), 0},
	} {
		if n := verify(c.o); n != c.want {
			t.Errorf("%s: %d violations, want %d", c.name, n, c.want)
		}
	}
}

// retention-bounds: the store deletes only what was created before the
// cutoff it is given. With a skew budget the cutoff lies a budget behind
// the TTL, so only this rule sees a delete inclusive at the cutoff.
func TestCheckTTLDeleteAtTheStoresCutoff(t *testing.T) {
	p := chkParams()
	p.ClockSkewBudget = time.Minute
	run := func(created time.Duration) int {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		now := chkEpoch.Add(3 * time.Hour)
		cutoff := now.Add(-p.RetentionTTL - p.ClockSkewBudget)
		r.at(now.Sub(chkEpoch)).add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now, Cutoff: cutoff,
			Deleted: []impl.Message{{Subscriber: "b1", EventID: "e1", CreatedAt: cutoff.Add(created)}}})
		n := 0
		for _, v := range Check(r.obs, CheckFinal{}, p) {
			if v.Invariant == InvRetentionBounds {
				n++
			}
		}
		return n
	}
	if n := run(-time.Nanosecond); n != 0 {
		t.Errorf("deleted a nanosecond before the cutoff: %d violations, want 0", n)
	}
	if n := run(0); n != 1 {
		t.Errorf("deleted exactly at the cutoff: %d violations, want 1", n)
	}
}

package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

var chkEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// chkRun builds an observation sequence step by step.
type chkRun struct {
	obs  []Observation
	now  time.Time
	step int64
}

func newChkRun() *chkRun { return &chkRun{now: chkEpoch} }

func (r *chkRun) at(d time.Duration) *chkRun { r.now = chkEpoch.Add(d); return r }

func (r *chkRun) add(o Observation) *chkRun {
	r.step++
	o.Step, o.Time = r.step, r.now
	r.obs = append(r.obs, o)
	return r
}

func chkP(major, minor int64) impl.Position { return impl.Position{Major: major, Minor: minor} }

func (r *chkRun) member(stream, bot string, from impl.Position, member bool) *chkRun {
	return r.add(Observation{Kind: ObsMembership, Stream: stream, Bot: bot, Pos: from, Member: member, LogStream: true})
}

func (r *chkRun) produce(stream, id string, p impl.Position) *chkRun {
	return r.add(Observation{Kind: ObsProduced, Stream: stream, LogStream: true, EventID: id, Pos: p, Payload: []byte("payload-" + id)})
}

func (r *chkRun) arrive(id string) *chkRun {
	return r.add(Observation{Kind: ObsArrived, Node: "n1", EventID: id})
}

func (r *chkRun) enqueue(bot, id string) *chkRun {
	return r.add(Observation{Kind: ObsEnqueued, Node: "n1", Messages: []impl.Message{{Subscriber: bot, EventID: id}}})
}

func (r *chkRun) send(bot, id string, p impl.Position, attempt int) *chkRun {
	return r.add(Observation{Kind: ObsSend, Node: "n1", Bot: bot, EventID: id, Stream: "s1", Pos: p, Payload: []byte("payload-" + id)})
}

func (r *chkRun) handle(bot, id string) *chkRun {
	return r.add(Observation{Kind: ObsHandled, Bot: bot, EventID: id, Payload: []byte("payload-" + id)})
}

func (r *chkRun) ok(bot, id string) *chkRun {
	return r.add(Observation{Kind: ObsResult, Node: "n1", Bot: bot, EventID: id, OK: true})
}

func (r *chkRun) ack(bot, id string) *chkRun {
	return r.add(Observation{Kind: ObsAcked, Node: "n1", Keys: []impl.MessageKey{{Subscriber: bot, EventID: id}}})
}

func (r *chkRun) cursor(stream string, p impl.Position) *chkRun {
	return r.add(Observation{Kind: ObsCursor, Node: "n1", Cursor: impl.Cursor{Key: impl.CursorKey{Stream: stream}, Pos: p}})
}

// cleanup observes a TTL and a cap cleanup that deleted nothing and left
// remaining.
func (r *chkRun) cleanup(remaining ...impl.Message) *chkRun {
	r.add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: r.now, Remaining: remaining})
	return r.add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "cap", Clock: r.now, Max: 10, Remaining: remaining})
}

func (r *chkRun) deliver(bot, id string, p impl.Position) *chkRun {
	return r.enqueue(bot, id).send(bot, id, p, 1).handle(bot, id).ok(bot, id).ack(bot, id)
}

func chkParams() CheckParams {
	p := DefaultCheckParams()
	p.RetentionTTL = time.Hour
	p.RetentionMax = 10
	p.ClockSkewBudget = 0
	p.LivenessBound = 10 * time.Minute
	p.HOLBound = time.Minute
	p.DedupWindow = time.Hour
	p.DedupMaxEntries = 100
	return p
}

// cleanRun is a healthy history: two events delivered to their one member,
// cleanups on time, a heal and an end.
func chkCleanRun() *chkRun {
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").deliver("b1", "e1", chkP(1, 0)).cursor("s1", chkP(1, 0))
	r.at(2*time.Second).produce("s1", "e2", chkP(1, 1)).arrive("e2").deliver("b1", "e2", chkP(1, 1)).cursor("s1", chkP(1, 1))
	r.at(5 * time.Minute).cleanup()
	r.at(10 * time.Minute).cleanup()
	r.add(Observation{Kind: ObsHeal})
	r.at(11 * time.Minute).add(Observation{Kind: ObsEnd})
	return r
}

// chkCheck checks r. The small runs here seldom write cursors, so
// cursor-progress (TestCheckCursorProgress) is left out of their verdicts.
func chkCheck(t *testing.T, r *chkRun, final CheckFinal, p CheckParams) []Violation {
	t.Helper()
	var vs []Violation
	for _, v := range chkCheckAll(t, r, final, p) {
		if v.Invariant != InvCursorProgress {
			vs = append(vs, v)
		}
	}
	return vs
}

func chkCheckAll(t *testing.T, r *chkRun, final CheckFinal, p CheckParams) []Violation {
	t.Helper()
	vs := Check(r.obs, final, p)
	again := Check(r.obs, final, p)
	if len(vs) != len(again) {
		t.Fatalf("Check is not deterministic: %d then %d violations", len(vs), len(again))
	}
	for i := range vs {
		if vs[i] != again[i] {
			t.Fatalf("Check is not deterministic at %d: %v vs %v", i, vs[i], again[i])
		}
	}
	return vs
}

func chkWantOnly(t *testing.T, vs []Violation, inv string) Violation {
	t.Helper()
	if len(vs) == 0 {
		t.Fatalf("want a %s violation, got none", inv)
	}
	for _, v := range vs {
		if v.Invariant != inv {
			t.Fatalf("want only %s violations, got %v", inv, v)
		}
	}
	return vs[0]
}

func TestCheckCleanRunPasses(t *testing.T) {
	rep := CheckDetailed(chkCleanRun().obs, CheckFinal{}, chkParams())
	if len(rep.Violations) != 0 {
		t.Fatalf("clean run has violations: %v", rep.Violations)
	}
	if rep.Stats.Obligations != 2 || rep.Stats.Handled != 2 || rep.Stats.Events != 2 {
		t.Fatalf("stats = %+v, want 2 events, 2 obligations, 2 handled", rep.Stats)
	}
}

func TestCheckSilentLoss(t *testing.T) {
	r := chkCleanRun()
	// e3 is owed to b1 but nothing ever happens to it.
	r.obs = append(r.obs[:len(r.obs)-2], Observation{Step: 900, Time: chkEpoch.Add(3 * time.Second), Kind: ObsProduced, Stream: "s1", LogStream: true, EventID: "e3", Pos: chkP(1, 2), Payload: []byte("x")})
	r.obs = append(r.obs, Observation{Step: 901, Time: chkEpoch.Add(10 * time.Minute), Kind: ObsHeal}, Observation{Step: 902, Time: chkEpoch.Add(11 * time.Minute), Kind: ObsEnd})
	v := chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvNoSilentLoss)
	if v.Bot != "b1" || v.Event != "e3" {
		t.Fatalf("violation names %s/%s, want b1/e3", v.Bot, v.Event)
	}
}

func TestCheckResolutionsAreNotLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(r *chkRun)
	}{
		{"dead-lettered", func(r *chkRun) {
			for a := 1; a <= 3; a++ {
				r.send("b1", "e3", chkP(1, 0), a)
				r.add(Observation{Kind: ObsWire, Bot: "b1", EventID: "e3", Outcome: "status", Status: 500})
			}
			r.add(Observation{Kind: ObsDead, Node: "n1", Bot: "b1", EventID: "e3"})
		}},
		{"dropped by retention", func(r *chkRun) {
			r.add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "cap", Clock: r.now, Max: 10,
				Deleted: []impl.Message{{Subscriber: "b1", EventID: "e3", CreatedAt: r.now}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			r.member("s1", "b1", impl.Position{}, true)
			r.at(time.Second).produce("s1", "e3", chkP(1, 0)).enqueue("b1", "e3")
			tc.add(r)
			r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
			if vs := chkCheck(t, r, CheckFinal{}, chkParams()); len(vs) != 0 {
				t.Fatalf("a %s obligation was reported: %v", tc.name, vs)
			}
		})
	}
}

func TestCheckLiveness(t *testing.T) {
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).enqueue("b1", "e1")
	r.add(Observation{Kind: ObsCursor, Node: "n1", Stream: "s1", LogStream: true, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: chkP(1, 0)}})
	r.at(time.Minute).add(Observation{Kind: ObsHeal})
	r.at(20 * time.Minute).add(Observation{Kind: ObsEnd})
	final := CheckFinal{Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 2}}}
	chkWantOnly(t, chkCheck(t, r, final, chkParams()), InvLiveness)

	// Handled, but only 15 minutes after the heal: late.
	r = newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).enqueue("b1", "e1")
	r.add(Observation{Kind: ObsCursor, Node: "n1", Stream: "s1", LogStream: true, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: chkP(1, 0)}})
	r.at(time.Minute).add(Observation{Kind: ObsHeal})
	r.at(16*time.Minute).handle("b1", "e1").add(Observation{Kind: ObsEnd})
	v := chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvLiveness)
	if !strings.Contains(v.Detail, "beyond the liveness bound") {
		t.Fatalf("detail %q does not explain lateness", v.Detail)
	}
}

func TestCheckPhantomDelivery(t *testing.T) {
	base := func() *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.member("s1", "b2", chkP(1, 0), true) // b2 joins after (1,0)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).deliver("b1", "e1", chkP(1, 0))
		return r
	}
	// Sent to b2, which joined strictly after e1's position.
	r := base().send("b2", "e1", chkP(1, 0), 1)
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	v := chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvNoPhantomDelivery)
	if v.Bot != "b2" || v.Event != "e1" {
		t.Fatalf("violation names %s/%s", v.Bot, v.Event)
	}
	// The handler got a body that was never produced.
	r = base()
	r.add(Observation{Kind: ObsHandled, Bot: "b1", EventID: "e9", Payload: []byte("forged")})
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvNoPhantomDelivery)
	// Right event, altered payload.
	r = base()
	// (From another node: a repeat by n1 after its own ack would also be
	// an idempotent-replay violation.)
	r.add(Observation{Kind: ObsSend, Node: "n2", Bot: "b1", EventID: "e1", Stream: "s1", Pos: chkP(1, 0), Payload: []byte("tampered")})
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvNoPhantomDelivery)
}

func TestCheckMembershipTimeline(t *testing.T) {
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.member("s1", "b1", chkP(1, 1), false) // leaves after (1,1)
	r.member("s1", "b1", chkP(1, 3), true)  // back after (1,3)
	c := newChecker(chkParams())
	for i := range r.obs {
		c.observe(&r.obs[i])
	}
	for _, tc := range []struct {
		p    impl.Position
		want bool
	}{{chkP(1, 0), true}, {chkP(1, 1), true}, {chkP(1, 2), false}, {chkP(1, 3), false}, {chkP(1, 4), true}} {
		if got := c.memberAt("s1", "b1", tc.p); got != tc.want {
			t.Errorf("memberAt(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

func TestCheckCursorMonotonic(t *testing.T) {
	r := chkCleanRun()
	r.obs = r.obs[:len(r.obs)-2]
	r.cursor("s1", chkP(1, 0))
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	v := chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvCursorMonotonic)
	if !strings.Contains(v.Detail, "backwards") {
		t.Fatalf("detail %q", v.Detail)
	}
}

func TestCheckCursorLowWatermark(t *testing.T) {
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).produce("s1", "e2", chkP(1, 1))
	// The cursor passes e2 while only e1 was handed off.
	r.enqueue("b1", "e1").cursor("s1", chkP(1, 1))
	r.enqueue("b1", "e2").send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1").send("b1", "e2", chkP(1, 1), 1).handle("b1", "e2")
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	v := chkWantOnly(t, chkCheck(t, r, CheckFinal{}, chkParams()), InvCursorLowWatermark)
	if v.Event != "e2" || v.Step != 5 {
		t.Fatalf("violation = %v, want e2 at the cursor's step 5", v)
	}
	// A 2xx counts as a durable hand-off too.
	r = newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1").ok("b1", "e1").cursor("s1", chkP(1, 0))
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	if vs := chkCheck(t, r, CheckFinal{}, chkParams()); len(vs) != 0 {
		t.Fatalf("2xx hand-off reported: %v", vs)
	}
}

func TestCheckIdempotentReplay(t *testing.T) {
	mk := func(gap time.Duration) *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).deliver("b1", "e1", chkP(1, 0))
		r.at(time.Second+gap).handle("b1", "e1")
		r.add(Observation{Kind: ObsCursor, Node: "n1", Stream: "s1", LogStream: true, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: chkP(1, 0)}})
		r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return r
	}
	p := chkParams()
	p.LivenessBound = 10 * time.Hour
	chkWantOnly(t, chkCheck(t, mk(10*time.Minute), CheckFinal{}, p), InvIdempotentReplay)

	rep := CheckDetailed(mk(2*time.Hour).obs, CheckFinal{}, p)
	if len(rep.Violations) != 0 || rep.Stats.BeyondWindowDuplicates != 1 {
		t.Fatalf("a duplicate beyond the window: violations %v, beyond-window count %d (want none, 1)",
			rep.Violations, rep.Stats.BeyondWindowDuplicates)
	}

	// Evicted by size: the bot handled DedupMaxEntries other events in between.
	p.DedupMaxEntries = 2
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).produce("s1", "e2", chkP(1, 1)).produce("s1", "e3", chkP(1, 2))
	r.handle("b1", "e1").handle("b1", "e2").handle("b1", "e3").handle("b1", "e1")
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	rep = CheckDetailed(r.obs, CheckFinal{}, p)
	if vs := chkCheck(t, r, CheckFinal{}, p); len(vs) != 0 || rep.Stats.BeyondWindowDuplicates != 1 {
		t.Fatalf("a duplicate after size eviction: %v, beyond %d", vs, rep.Stats.BeyondWindowDuplicates)
	}
}

func TestCheckRetention(t *testing.T) {
	msg := func(id string, created time.Duration) impl.Message {
		return impl.Message{Subscriber: "b1", EventID: id, CreatedAt: chkEpoch.Add(created)}
	}
	run := func(o Observation) []Violation {
		r := newChkRun()
		r.at(2 * time.Hour).add(o)
		return Check(r.obs, CheckFinal{}, chkParams())
	}
	now := chkEpoch.Add(2 * time.Hour)
	// TTL rule deleted a 30-minute-old message (TTL 1h).
	v := chkWantOnly(t, run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now,
		Deleted: []impl.Message{msg("young", 90*time.Minute)}}), InvRetentionBounds)
	if v.Event != "young" || !strings.Contains(v.Detail, "younger") {
		t.Fatalf("violation = %v", v)
	}
	// A 90-minute-old unleased message survived a TTL cleanup.
	chkWantOnly(t, run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now,
		Remaining: []impl.Message{msg("old", 30*time.Minute)}}), InvRetentionBounds)
	// ... unless it is being delivered.
	leased := msg("old", 30*time.Minute)
	leased.LeaseUntil = now.Add(time.Second)
	if vs := run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now, Remaining: []impl.Message{leased}}); len(vs) != 0 {
		t.Fatalf("a leased message kept by the TTL rule was reported: %v", vs)
	}
	// Deleting a leased message is a violation.
	chkWantOnly(t, run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "ttl", Clock: now, Deleted: []impl.Message{leased}}), InvRetentionBounds)
	// Cap 10: 11 unleased remain.
	var many []impl.Message
	for i := 0; i < 11; i++ {
		many = append(many, msg(string(rune('a'+i)), 100*time.Minute))
	}
	chkWantOnly(t, run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "cap", Clock: now, Max: 10, Remaining: many}), InvRetentionBounds)
	// The cap trimmed a newer message while keeping an older one.
	v = chkWantOnly(t, run(Observation{Kind: ObsCleanup, Node: "n1", Rule: "cap", Clock: now, Max: 10,
		Deleted: []impl.Message{msg("newer", 110*time.Minute)}, Remaining: []impl.Message{msg("older", 100*time.Minute)}}), InvRetentionBounds)
	if v.Event != "newer" {
		t.Fatalf("violation = %v", v)
	}
}

func TestCheckRetentionUsesTrueAgeAcrossSkewedClocks(t *testing.T) {
	// Enqueued at 00:10 by a node whose clock lags 5 minutes (CreatedAt
	// 00:05); deleted at 01:08 by a node whose clock is right. By the
	// cleaner's clock it is 63 minutes old; it truly is 58.
	r := newChkRun()
	r.at(10*time.Minute).enqueue("b1", "e1")
	r.at(68 * time.Minute).add(Observation{Kind: ObsCleanup, Node: "n2", Rule: "ttl", Clock: r.now,
		Deleted: []impl.Message{{Subscriber: "b1", EventID: "e1", CreatedAt: chkEpoch.Add(5 * time.Minute)}}})
	v := chkWantOnly(t, Check(r.obs, CheckFinal{}, chkParams()), InvRetentionBounds)
	if !strings.Contains(v.Detail, "clock skew") {
		t.Fatalf("violation = %v", v)
	}
}

func TestCheckCleanupCadence(t *testing.T) {
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	r.at(5 * time.Minute).cleanup()
	r.at(30 * time.Minute).add(Observation{Kind: ObsEnd})
	v := chkWantOnly(t, Check(r.obs, CheckFinal{}, chkParams()), InvRetentionBounds)
	if !strings.Contains(v.Detail, "since its last retention cleanup") {
		t.Fatalf("violation = %v", v)
	}
	// A crashed node owes no cleanups while it is down.
	r = newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	r.at(time.Minute).add(Observation{Kind: ObsNodeDown, Node: "n1"})
	r.at(30 * time.Minute).add(Observation{Kind: ObsEnd})
	if vs := Check(r.obs, CheckFinal{}, chkParams()); len(vs) != 0 {
		t.Fatalf("a down node was held to the cadence: %v", vs)
	}
}

func TestCheckBoundedRetry(t *testing.T) {
	r := newChkRun()
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	for a := 1; a <= 4; a++ {
		r.send("b1", "e1", chkP(1, 0), a)
		r.add(Observation{Kind: ObsWire, Bot: "b1", EventID: "e1", Outcome: "timeout"})
	}
	r.add(Observation{Kind: ObsDead, Bot: "b1", EventID: "e1"})
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	vs := chkCheck(t, r, CheckFinal{}, chkParams())
	chkWantOnly(t, vs, InvBoundedRetry)
	if len(vs) != 1 {
		t.Fatalf("want one bounded-retry violation (the fourth send), got %v", vs)
	}

	// Four sends are fine when a crash lost one outcome: the send in
	// flight at the crash was never recorded, and a claim after the reboot
	// superseded it.
	r = newChkRun()
	row := []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 1}}
	r.add(Observation{Kind: ObsNodeUp, Node: "n1"})
	r.member("s1", "b1", impl.Position{}, true)
	r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
	r.send("b1", "e1", chkP(1, 0), 1)
	r.add(Observation{Kind: ObsWire, Bot: "b1", EventID: "e1", Outcome: "timeout"})
	r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: row})
	r.send("b1", "e1", chkP(1, 0), 2)
	r.add(Observation{Kind: ObsNodeDown, Node: "n1"}).add(Observation{Kind: ObsNodeUp, Node: "n1"})
	r.add(Observation{Kind: ObsClaimed, Node: "n1", Messages: row})
	r.send("b1", "e1", chkP(1, 0), 2)
	r.add(Observation{Kind: ObsWire, Bot: "b1", EventID: "e1", Outcome: "timeout"})
	r.add(Observation{Kind: ObsFailed, Node: "n1", Bot: "b1", EventID: "e1", Messages: []impl.Message{{Subscriber: "b1", EventID: "e1", Attempts: 2}}})
	r.send("b1", "e1", chkP(1, 0), 3).handle("b1", "e1")
	r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
	p := chkParams()
	p.CleanupInterval = 0
	if vs := chkCheck(t, r, CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("retries across a reboot were reported: %v", vs)
	}
}

func TestCheckHeadOfLine(t *testing.T) {
	mk := func(down bool) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		if down {
			r.at(10 * time.Second).add(Observation{Kind: ObsNodeDown, Node: "n1"})
			r.at(4 * time.Minute)
			r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: r.now})
		}
		r.at(4*time.Minute+30*time.Second).send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1")
		r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return r
	}
	p := chkParams()
	p.CleanupInterval = 0
	p.HealthyBots = []string{"b1"}
	v := chkWantOnly(t, chkCheck(t, mk(false), CheckFinal{}, p), InvNoHeadOfLine)
	if v.Bot != "b1" || v.Event != "e1" {
		t.Fatalf("violation = %v", v)
	}
	// The same delay is excused when the engine was down for most of it.
	if vs := chkCheck(t, mk(true), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("downtime was not allowed for: %v", vs)
	}
	// Bots that are not known healthy are not held to the bound.
	p.HealthyBots = nil
	if vs := chkCheck(t, mk(false), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("an unhealthy bot was held to the HOL bound: %v", vs)
	}
}

// A healthy bot's copy that retention dropped is resolved by the drop; the
// event's later re-delivery is timed from its own arrival (seed 15062), but
// that new obligation is still held to the bound.
func TestCheckHeadOfLineAfterRetentionDrop(t *testing.T) {
	mk := func(handleAfter time.Duration, fresh bool) *chkRun {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).arrive("e1").enqueue("b1", "e1")
		r.at(10 * time.Second).add(Observation{Kind: ObsCleanup, Node: "n1", Rule: "cap", Clock: r.now, Max: 10,
			Deleted: []impl.Message{{Subscriber: "b1", EventID: "e1", CreatedAt: chkEpoch.Add(time.Second)}}})
		if fresh {
			// The node crashed and booted since it was handed e1: the
			// re-delivery is one it must act on.
			r.at(5 * time.Minute).add(Observation{Kind: ObsNodeDown, Node: "n1"})
			r.at(5*time.Minute + time.Second).add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: r.now})
		}
		r.at(10*time.Minute).arrive("e1").enqueue("b1", "e1")
		r.at(10*time.Minute+handleAfter).send("b1", "e1", chkP(1, 0), 1).handle("b1", "e1")
		r.add(Observation{Kind: ObsHeal}).add(Observation{Kind: ObsEnd})
		return r
	}
	p := chkParams()
	p.CleanupInterval = 0
	p.HealthyBots = []string{"b1"}
	if vs := chkCheck(t, mk(30*time.Second, true), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("a re-delivery handled 30s after its arrival was reported: %v", vs)
	}
	v := chkWantOnly(t, chkCheck(t, mk(5*time.Minute, true), CheckFinal{}, p), InvNoHeadOfLine)
	if v.Bot != "b1" || v.Event != "e1" {
		t.Fatalf("violation = %v", v)
	}
	// A repeat to the node that had the event already owes nothing, so
	// it is not timed; that the node queued it again anyway, in the same
	// incarnation, is a replay that changed durable state.
	v = chkWantOnly(t, chkCheck(t, mk(5*time.Minute, false), CheckFinal{}, p), InvIdempotentReplay)
	if !strings.Contains(v.Detail, "same incarnation") {
		t.Fatalf("violation = %v", v)
	}
}

func TestCheckOverlap(t *testing.T) {
	at := func(m int) time.Time { return chkEpoch.Add(time.Duration(m) * time.Minute) }
	ivs := []chkInterval{{at(0), at(10)}, {at(5), at(15)}, {at(20), at(30)}}
	if got := chkOverlap(ivs, at(2), at(25)); got != 18*time.Minute {
		t.Fatalf("overlap = %v, want 18m (2..15 and 20..25)", got)
	}
}

func TestInvariantNamesAreStable(t *testing.T) {
	want := "no-silent-loss,no-phantom-delivery,cursor-monotonic,cursor-low-watermark,idempotent-replay,retention-bounds,bounded-retry,no-head-of-line-blocking,liveness,snapshot-convergence,snapshot-isolation," +
		"dead-letter-earned,signed-requests-verify,retry-backoff,cursor-progress,receiver-dedup-bounds,acked-after-delivery,settings-validation,breaker-policy,reported-counters,resume-from-cursor,in-flight-limit,resend-with-cause,snapshot-progress"
	if got := strings.Join(Invariants(), ","); got != want {
		t.Fatalf("Invariants() = %s", got)
	}
}

func TestCheckCursorProgress(t *testing.T) {
	cursor := func(r *chkRun, p impl.Position) {
		r.add(Observation{Kind: ObsCursor, Node: "n1", Stream: "s1", LogStream: true, Cursor: impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: p}})
	}
	mk := func(last impl.Position, lateBy time.Duration) *chkRun {
		r := newChkRun()
		r.member("s1", "b1", impl.Position{}, true)
		r.at(time.Second).produce("s1", "e1", chkP(1, 0)).enqueue("b1", "e1").handle("b1", "e1")
		r.produce("s1", "e2", chkP(1, 1)).enqueue("b1", "e2").handle("b1", "e2")
		r.at(time.Minute).add(Observation{Kind: ObsHeal})
		r.at(lateBy)
		cursor(r, last)
		return r.add(Observation{Kind: ObsEnd})
	}
	p := chkParams()
	if vs := chkCheckAll(t, mk(chkP(1, 1), time.Minute), CheckFinal{}, p); len(vs) != 0 {
		t.Fatalf("a cursor that reached the last event was reported: %v", vs)
	}
	v := chkWantOnly(t, chkCheckAll(t, mk(chkP(1, 0), time.Minute), CheckFinal{}, p), InvCursorProgress)
	if v.Event != "e2" {
		t.Fatalf("violation names %q, want the last event e2", v.Event)
	}
	v = chkWantOnly(t, chkCheckAll(t, mk(chkP(1, 1), p.LivenessBound+2*time.Minute), CheckFinal{}, p), InvCursorProgress)
	if !strings.Contains(v.Detail, "beyond the liveness bound") {
		t.Fatalf("detail %q does not say the cursor was late", v.Detail)
	}
}

// checkCleanupCadence skips its scan until a cached due time: a cleanup, a
// reboot or a crash moves that time, and a node whose cleaner stops is
// still reported, once, at the first observation past its limit, whatever
// the other node does meanwhile.
func TestCheckCleanupCadenceDue(t *testing.T) {
	p := chkParams()
	limit := 2*p.CleanupInterval + p.CleanupSlack
	cleanup := func(r *chkRun, node string) {
		r.add(Observation{Kind: ObsCleanup, Node: node, Rule: "ttl", Clock: r.now})
	}
	tick := func(r *chkRun) { r.add(Observation{Kind: ObsHeal}) }
	for _, stop := range []bool{false, true} {
		r := newChkRun()
		r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
		r.add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: chkEpoch})
		// n2 crashes and reboots late: its limit runs from the reboot.
		r.at(limit / 2).add(Observation{Kind: ObsNodeDown, Node: "n2"})
		r.at(limit / 2).add(Observation{Kind: ObsNodeUp, Node: "n2", Clock: r.now})
		for i := time.Duration(1); i <= 6; i++ {
			at := i * p.CleanupInterval
			r.at(at)
			tick(r)
			cleanup(r, "n2")
			if !stop || i <= 2 {
				cleanup(r, "n1")
			}
			r.at(at + p.CleanupInterval/2)
			tick(r)
		}
		vs := Check(r.obs, CheckFinal{}, p)
		var n int
		for _, v := range vs {
			if v.Invariant == InvRetentionBounds && strings.Contains(v.Detail, "node n1 has run") {
				n++
			} else if v.Invariant == InvRetentionBounds {
				t.Errorf("stop=%v: %v", stop, v)
			}
		}
		if want := map[bool]int{false: 0, true: 1}[stop]; n != want {
			t.Errorf("stop=%v: %d cadence reports for n1, want %d: %v", stop, n, want, vs)
		}
	}
	// A node that boots when none is up, and never cleans.
	r := newChkRun()
	tick(r)
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	for i := time.Duration(1); i <= 6; i++ {
		r.at(i * p.CleanupInterval)
		tick(r)
	}
	if vs := Check(r.obs, CheckFinal{}, p); len(vs) != 1 || !strings.Contains(vs[0].Detail, "node n1 has run") {
		t.Errorf("a node that never cleans: %v, want one cadence report", vs)
	}
}

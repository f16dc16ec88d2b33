package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// heldWorld: bot-1 registered without a key and a member of the log
// stream; ev-01 .. ev-15 produced and fetched at +1 s .. +15 s; the key
// published at +16 s and the first request to the bot at +16.5 s (so the
// bot was held until then). With a TTL of 6 s and a cap of 3, ev-01 ..
// ev-10 may be past the TTL (fetched before 16.5 - 6 + 0.25 s), ev-11 and
// ev-12 beyond the cap, and ev-13 .. ev-15 must be kept.
func heldWorld() (*recorder, judgeParams) {
	r := newRecorder()
	r.start = t0
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keyless["bot-1"] = true
	r.membershipLocked(streamLog, "bot-1", impl.Position{}, true)
	for i := 1; i <= 15; i++ {
		id := fmt.Sprintf("ev-%02d", i)
		r.producedLocked(streamLog, true, id, impl.Position{Major: int64(i)}, []byte(`{}`))
		r.events[id].at = at(i * 1000)
		r.events[id].served = []time.Time{at(i * 1000)}
	}
	r.keyAt["bot-1"] = at(16_000)
	p := params()
	p.Retention = true
	p.Declared.RetentionTTL, p.Declared.RetentionMax, p.Declared.CleanupInterval = 6*time.Second, 3, 2*time.Second
	return r, p
}

// deliver: the bot was sent and handled each of ids from +16.5 s on.
func deliver(r *recorder, ids ...int) {
	for j, i := range ids {
		id := fmt.Sprintf("ev-%02d", i)
		ms := 16_500 + 10*j
		r.requests = append(r.requests, &request{bot: "bot-1", event: id, at: at(ms), answered: at(ms + 5), outcome: outOK, status: 200})
		r.firstHandled[key{"bot-1", id}] = at(ms + 2)
		r.handlerRuns[key{"bot-1", id}] = 1
	}
}

func reportDrops(r *recorder, n int64) {
	depth := 0
	r.atEnd = &protocol.Observation{QueueDepth: &depth, RetentionDrops: []protocol.RetentionDrop{{Bot: "bot-1", TTL: n - 2, Cap: 2}}}
}

// The reference's outcome: the newest three kept and sent, the twelve
// older dropped and counted. Nothing is lost, the settle does not wait
// for the dropped ones, and the report counts them apart. The earliest
// ones were surely past the TTL with a healthy engine up, but a long kill
// over that span leaves no cleanup to be sure of.
func TestRetentionMayDropIsNoLoss(t *testing.T) {
	r, p := heldWorld()
	r.kills = []kill{{at: at(1_500), reaped: at(1_600), up: at(15_000), planned: true}}
	deliver(r, 13, 14, 15)
	reportDrops(r, 12)
	for _, inv := range []string{oracle.InvRetentionBounds, oracle.InvNoSilentLoss, oracle.InvLiveness} {
		if vs := violationsOf(r, p, inv); len(vs) != 0 {
			t.Errorf("%s on the reference's drops: %v", inv, vs)
		}
	}
	if !r.settled(p) {
		t.Errorf("the settle waits for messages retention may drop: %v", r.settleOpen)
	}
	v := r.retentionView(p)
	for i, want := range map[int]string{1: "ttl", 10: "ttl", 11: "cap", 12: "cap", 13: "", 15: ""} {
		if got := v.dropBy(key{"bot-1", fmt.Sprintf("ev-%02d", i)}); got != want {
			t.Errorf("ev-%02d: may be dropped by %q; want %q", i, got, want)
		}
	}
	// Without retention declared the same run loses twelve messages.
	p.Retention = false
	if vs := violationsOf(r, p, oracle.InvNoSilentLoss); len(vs) != 12 {
		t.Errorf("no retention declared: %d losses; want 12", len(vs))
	}
}

// Planted: the cap keeps the oldest (ev-01 .. ev-03 sent, the newest
// lost); drops not counted; no retention at all (the earliest messages
// were past the TTL through a cleanup interval of a healthy engine).
func TestRetentionBoundsCatches(t *testing.T) {
	r, p := heldWorld()
	deliver(r, 1, 2, 3)
	reportDrops(r, 12)
	var kept []string
	for _, v := range violationsOf(r, p, oracle.InvRetentionBounds) {
		if strings.Contains(v.Detail, "must keep") {
			kept = append(kept, v.Event)
		}
	}
	if strings.Join(kept, ",") != "ev-13,ev-14,ev-15" {
		t.Errorf("keeps oldest: %v named as messages retention must keep; want ev-13 .. ev-15", kept)
	}
	if n := len(violationsOf(r, p, oracle.InvNoSilentLoss)); n != 3 {
		t.Errorf("keeps oldest: %d losses; want the 3 newest", n)
	}
	if vs := detailsWith(r, p, "keep the newest"); len(vs) != 1 || vs[0].Event != "ev-12" {
		t.Errorf("keeps oldest: %v; want one violation naming ev-12, the newest missing one older sent ones outrank", vs)
	}
	depth := 3 // something still queued: a kept message may be on its way
	r.atEnd.QueueDepth = &depth
	if vs := detailsWith(r, p, "keep the newest"); len(vs) != 0 {
		t.Errorf("keeps oldest with messages still queued: %v", vs)
	}

	// The TTL served far shorter than declared: more drops by the TTL
	// than messages past it (ev-01 .. ev-10).
	r, p = heldWorld()
	deliver(r, 13, 14, 15)
	r.atEnd = &protocol.Observation{RetentionDrops: []protocol.RetentionDrop{{Bot: "bot-1", TTL: 12}}}
	if vs := detailsWith(r, p, "younger than the TTL"); len(vs) != 1 {
		t.Errorf("12 drops by the TTL of 10 messages past it: %v", vs)
	}
	r.atEnd.RetentionDrops[0] = protocol.RetentionDrop{Bot: "bot-1", TTL: 10, Cap: 2}
	if vs := violationsOf(r, p, oracle.InvRetentionBounds); len(vs) != 0 {
		t.Errorf("10 by the TTL and 2 by the cap: %v", vs)
	}

	r, p = heldWorld()
	deliver(r, 13, 14, 15)
	reportDrops(r, 0)
	r.atEnd.RetentionDrops = []protocol.RetentionDrop{}
	vs := violationsOf(r, p, oracle.InvRetentionBounds)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "must be counted") {
		t.Errorf("uncounted: %v", vs)
	}
	r.atEnd.RetentionDrops = nil // not reported at all: the count is not judged
	if vs := violationsOf(r, p, oracle.InvRetentionBounds); len(vs) != 0 {
		t.Errorf("no retention_drops reported: %v", vs)
	}

	r, p = heldWorld()
	deliver(r, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	reportDrops(r, 0)
	vs = violationsOf(r, p, oracle.InvRetentionBounds)
	// Fetched at +5 s at the latest: 1.4 s to store, 6 s of TTL, 0.25 s,
	// and a 3 s healthy span all end by the key at +16 s.
	if len(vs) != 5 || vs[4].Event != "ev-05" || !strings.Contains(vs[4].Detail, "past the TTL") {
		t.Errorf("never drops: %v; want ev-01 .. ev-05 sent past the TTL", vs)
	}
	r.dbFaults = []window{{from: at(7_000), to: at(15_000)}}
	if vs := violationsOf(r, p, oracle.InvRetentionBounds); len(vs) != 0 {
		t.Errorf("never drops, with a database stall over every cleanup: %v", vs)
	}
}

// A bot with its key from the start reports no drop.
func TestRetentionOnlyOfHeld(t *testing.T) {
	r, p := heldWorld()
	deliver(r, 13, 14, 15)
	reportDrops(r, 12)
	r.atEnd.RetentionDrops = append(r.atEnd.RetentionDrops, protocol.RetentionDrop{Bot: "bot-0", TTL: 1})
	vs := violationsOf(r, p, oracle.InvRetentionBounds)
	if len(vs) != 1 || vs[0].Bot != "bot-0" {
		t.Errorf("a drop of a keyed bot: %v", vs)
	}
}

// The held span ends 5 s after the key (later across a database fault
// over that span), at the first request after the key, and the kill
// window after the kill of the process alive at the key (its successor
// reads the registry first).
func TestHeldUntil(t *testing.T) {
	r, p := heldWorld()
	if got := r.heldUntil("bot-1", p); !got.Equal(at(21_000)) {
		t.Errorf("no request, no kill: held until %s; want +21s", r.rel(got))
	}
	r.dbFaults = []window{{from: at(19_000), to: at(22_000)}}
	if got := r.heldUntil("bot-1", p); !got.Equal(at(23_400)) {
		t.Errorf("a stall to +22s: held until %s; want +23.4s", r.rel(got))
	}
	deliver(r, 15)
	if got := r.heldUntil("bot-1", p); !got.Equal(at(16_500)) {
		t.Errorf("first request +16.5s: held until %s", r.rel(got))
	}
	r.kills = []kill{{at: at(15_800), reaped: at(15_850), up: at(16_200), planned: true}}
	if got := r.heldUntil("bot-1", p); !got.Equal(at(16_300)) {
		t.Errorf("killed at +15.8s: held until %s; want +16.3s", r.rel(got))
	}
}

// Coverage by the rule the wire shows can have dropped each missing held
// message, and the newest cap sent whole (not when one of them is missing).
func TestRetentionCoverage(t *testing.T) {
	r, p := heldWorld()
	deliver(r, 13, 14, 15)
	counts := map[string]int{}
	r.retentionCoverage(p, counts)
	if counts[CovRetentionTTL] != 10 || counts[CovRetentionCap] != 2 || counts[CovRetentionAtCap] != 1 {
		t.Errorf("coverage %v; want 10 past the TTL, 2 beyond the cap, 1 backlog at the cap", counts)
	}
	r, p = heldWorld()
	deliver(r, 13, 15)
	counts = map[string]int{}
	r.retentionCoverage(p, counts)
	if counts[CovRetentionAtCap] != 0 {
		t.Errorf("ev-14 of the newest 3 never sent: backlog at the cap counted %d", counts[CovRetentionAtCap])
	}
}

func detailsWith(r *recorder, p judgeParams, part string) []oracle.Violation {
	var out []oracle.Violation
	for _, v := range violationsOf(r, p, oracle.InvRetentionBounds) {
		if strings.Contains(v.Detail, part) {
			out = append(out, v)
		}
	}
	return out
}

// The key waits for a backlog retention must cut: twice the cap served,
// the first a TTL and two cleanups ago; it waits for nothing without
// declared retention or after the latest instant.
func TestKeyWaitsForAHeldBacklog(t *testing.T) {
	var cfg Config
	cfg.Retention = true
	cfg.Engine.RetentionMax, cfg.Engine.RetentionTTL, cfg.Engine.CleanupInterval = 3, time.Second, time.Second
	h := &harness{cfg: cfg, rec: newRecorder(), bots: []*bot{{id: "bot-0"}, {id: "bot-9"}}}
	h.rec.streams["s"] = []memb{{bot: "bot-9", member: true}}
	h.rec.streams["other"] = []memb{{bot: "bot-0", member: true}}
	t0 := time.Unix(1000, 0)
	serve := func(stream string, n int) {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%s-%d", stream, len(h.rec.order))
			h.rec.events[id] = &produced{stream: stream, served: []time.Time{t0}}
			h.rec.order = append(h.rec.order, id)
		}
	}
	latest := t0.Add(time.Hour)
	serve("other", 10) // another bot's stream holds nothing for bot-9
	serve("s", 5)
	if h.heldEnoughLocked(t0.Add(time.Minute), latest) {
		t.Fatal("5 served of a cap of 3: the key did not wait for 6")
	}
	serve("s", 1)
	if h.heldEnoughLocked(t0.Add(2*time.Second), latest) {
		t.Fatal("the first served 2s ago: the key did not wait for a TTL and two cleanups (3s)")
	}
	if !h.heldEnoughLocked(t0.Add(3*time.Second), latest) {
		t.Fatal("6 served, the first 3s ago: the key still waits")
	}
	h.rec.events, h.rec.order = map[string]*produced{}, nil
	if !h.heldEnoughLocked(latest, latest) {
		t.Fatal("at the latest instant the key still waits")
	}
	h.cfg.Retention = false
	if !h.heldEnoughLocked(t0, latest) {
		t.Fatal("without declared retention the key waits")
	}
}

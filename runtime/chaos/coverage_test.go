package chaos

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
)

// The plan is a function of the seed and the flags, aimed kills and the
// long downtime included: a rerun gets the same plan.
func TestPlanWithAimsIsDeterministic(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2", "bot-3"}
	c := Config{Seed: 5, Duration: time.Minute, Kills: 10, DBCuts: 6, BotFaults: 15, Engine: ReferenceEngine()}
	a, b := Plan(c, bots), Plan(c, bots)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the same config drew two plans:\n%v\n%v", a, b)
	}
	for _, f := range a {
		if err := Executable(f); err != nil {
			t.Errorf("drawn fault not executable: %v", err)
		}
	}
}

// A 60 s run with 10 kills has one kill down for longer than the lookback
// and the lease, kills aimed at every moment, no other kill inside the
// long downtime, and every bot fault kind; a 20 s run with 4 kills still
// has the long downtime (it fits) and a kill aimed at an upstream answer.
func TestPlanReachesEveryKillSituation(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2", "bot-3"}
	e := ReferenceEngine()
	reg20 := 0
	for seed := uint64(1); seed <= 30; seed++ {
		p := Plan(Config{Seed: seed, Duration: time.Minute, Kills: 10, DBCuts: 6, BotFaults: 15, Engine: e}, bots)
		aimsSeen := map[string]int{}
		kinds := map[faults.Kind]bool{}
		var long *faults.Fault
		crashes := 0
		for i, f := range p {
			kinds[f.Kind] = true
			if f.Kind != faults.Crash {
				continue
			}
			crashes++
			aimsSeen[f.After]++
			if f.RestartAfter >= longDowntime(e) {
				long = &p[i]
			}
		}
		if crashes != 10 || long == nil {
			t.Fatalf("seed %d: %d kills, long downtime %v; want 10 and one", seed, crashes, long)
		}
		for _, a := range append([]string{""}, aims...) {
			if aimsSeen[a] == 0 {
				t.Errorf("seed %d: no kill aimed at %q (%v)", seed, a, aimsSeen)
			}
		}
		for _, k := range []faults.Kind{faults.Webhook5xx, faults.WebhookRefused, faults.WebhookTimeout, faults.WebhookSlow, faults.WebhookDuplicate, faults.StoreAmbiguous} {
			if !kinds[k] {
				t.Errorf("seed %d: no %s in the plan", seed, k)
			}
		}
		for _, f := range p {
			if f.Kind == faults.Crash && f.At > long.At && f.At < long.At+long.RestartAfter {
				t.Errorf("seed %d: a kill at %s falls inside the long downtime from %s", seed, f.At, long.At)
			}
		}
		p20 := Plan(Config{Seed: seed, Duration: 20 * time.Second, Kills: 4, Engine: e}, bots)
		if !slices.ContainsFunc(p20, func(f faults.Fault) bool { return f.RestartAfter >= longDowntime(e) }) ||
			!slices.ContainsFunc(p20, func(f faults.Fault) bool { return f.After == aimUpstream }) {
			t.Errorf("seed %d: a 20 s plan with 4 kills lacks the long downtime or a kill aimed at an upstream answer: %v", seed, p20)
		}
		if slices.ContainsFunc(p20, func(f faults.Fault) bool { return f.After == aimRegistry }) {
			reg20++
		}
	}
	// A registry-aimed kill needs a registry change clear of the other
	// kills; a short plan finds one for most seeds.
	t.Logf("%d of 30 short plans hold a registry-aimed kill", reg20)
	if reg20 < 20 {
		t.Errorf("%d of 30 20 s plans with 4 kills have a registry-aimed kill; want most", reg20)
	}
}

// Every payload is valid JSON that changes under a re-serialisation, and
// the five shapes come within five events.
func TestPayloadsAreValidAndNotFixedPoints(t *testing.T) {
	traits := map[string]bool{}
	for seq := 1; seq <= 5; seq++ {
		p := eventPayload(streamLog, seq, "ev-1-00000"+string(rune('0'+seq)), 42)
		var v any
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatalf("payload %d is not JSON: %v\n%s", seq, err, p)
		}
		again, _ := json.Marshal(v)
		if string(again) == string(p) {
			t.Errorf("payload %d survives a re-serialisation: %s", seq, p)
		}
		for _, tr := range payloadTraits(p) {
			traits[tr] = true
		}
	}
	for _, n := range payloadTraitNames {
		if !traits[n] {
			t.Errorf("no payload of 5 has %s", n)
		}
	}
}

// The answer classes reach every permanent status within 310 events, every
// retryable 4xx within 90, and a doomed event at 41.
func TestAnswerClassesReachEveryStatus(t *testing.T) {
	perm, trans, doomed := map[int]int{}, map[int]int{}, 0
	for seq := 1; seq <= 310; seq++ {
		switch c, st := answerClass(fmt.Sprintf("ev-11-%06d", seq)); c {
		case answerPermanent:
			if !impl.PermanentStatus(st) {
				t.Errorf("event %d: %d is not permanent", seq, st)
			}
			perm[st]++
		case answerTransient:
			if impl.PermanentStatus(st) {
				t.Errorf("event %d: %d is permanent", seq, st)
			}
			trans[st]++
		case answerDoomed:
			doomed++
		}
	}
	if len(perm) != len(permanentStatuses) || len(trans) != len(transientStatuses) || doomed == 0 {
		t.Errorf("permanent %v, retryable %v, doomed %d in 310 events", perm, trans, doomed)
	}
	b := &bot{chooses: true}
	var got []int
	for range 3 {
		got = append(got, b.chosenStatus("ev-11-000013"))
	}
	if got[0] != 408 || got[1] != 408 || got[2] != 0 {
		t.Errorf("a retryable event's answers: %v; want 408, 408, then taken", got)
	}
	for i := range 9 {
		if st := b.chosenStatus("ev-11-000041"); st == 0 || impl.PermanentStatus(st) {
			t.Errorf("a doomed event's answer %d: %d; want a retryable failure every time", i, st)
		}
	}
}

// Coverage counts from what the harness recorded: a doomed message with
// max-attempts retryable failures and no 2xx, a permanent answer, a
// retryable 4xx followed by a handler run, a handled payload's shapes and
// aimed kills; and says why it did not reach what the run had no room for.
func TestCoverageCountsFromTheRecord(t *testing.T) {
	e := ReferenceEngine()
	h := &harness{cfg: Config{Duration: 20 * time.Second, Rate: 20, Kills: 2, Bots: 4, Engine: e}, rec: newRecorder()}
	r := h.rec
	r.bots = []string{"bot-0", "bot-1"}
	produce := func(seq int) string {
		id := fmt.Sprintf("ev-1-%06d", seq)
		r.producedLocked(streamLog, true, id, impl.Position{Major: int64(seq)}, eventPayload(streamLog, seq, id, 1))
		return id
	}
	answer := func(id string, status int) {
		q := r.send("bot-1", id, r.events[id].payload, modeHealthy)
		r.answer(q, outStatus, status, time.Now())
	}
	doomed, perm, trans := produce(41), produce(57), produce(13)
	for i := range e.MaxAttempts {
		answer(doomed, doomedStatuses[i%len(doomedStatuses)])
	}
	answer(perm, 404)
	answer(trans, 408)
	r.send("bot-1", trans, r.events[trans].payload, modeHealthy)
	r.handled("bot-1", trans)
	now := time.Now()
	h.kills = []killDone{{aim: aimUpstream, at: now, up: now.Add(time.Second)}, {at: now, up: now.Add(longDowntime(e))}}

	r.mu.Lock()
	cs := h.coverage(nil)
	r.mu.Unlock()
	got := map[string]Situation{}
	for _, c := range cs {
		got[c.Name] = c
	}
	for name, want := range map[string]int{
		CovMaxAttempts: 1, covPermanentPrefix + "404": 1, covTransientPrefix + "408-then-handled": 1,
		covPermanentPrefix + "410": 0, CovPayloadNumbers: 1, CovPayloadDeep: 0,
		CovKillUpstream: 1, CovKillRandom: 1, CovKillLongDowntime: 1, CovKillOK: 0,
	} {
		if got[name].Count != want {
			t.Errorf("%s: count %d; want %d", name, got[name].Count, want)
		}
	}
	// 3 events produced: the seventh poisoned one (event 307) does not fit.
	if why := got[covPermanentPrefix+"422"].Why; !strings.Contains(why, "does not fit") {
		t.Errorf("permanent 422 not reached: why %q; want a does-not-fit reason", why)
	}
	if why := got[CovLongBotOutage].Why; !strings.Contains(why, "does not fit") {
		t.Errorf("long bot outage in a 20 s run: why %q; want a does-not-fit reason", why)
	}
}

// Every plan of a default 60 s run (the CLI's counts: 10 kills, 6
// database faults, 15 bot faults, 4 bots, retention declared) leaves room for every
// situation of the coverage list: whyNot, given the plan and the events
// the run produces, finds nothing that "does not fit". Among them the
// held-for-a-key situation: the last bot's long 503 window once covered
// its key publication, every held message failed into it and was
// dead-lettered, and a correct engine's 60 s run never reached it.
func TestDefaultPlansLeaveRoomForEverySituation(t *testing.T) {
	bots := []string{"bot-0", "bot-1", "bot-2", "bot-3"}
	for seed := uint64(1); seed <= 300; seed++ {
		c := Config{Seed: seed, Duration: time.Minute, Kills: 10, DBCuts: 6, BotFaults: -1, Retention: true}
		c.Defaults()
		plan := Plan(c, bots)
		h := &harness{cfg: c, rec: newRecorder()}
		h.rec.order = make([]string, c.Rate*int(c.Duration/time.Second))
		for _, s := range coverageCatalogue() {
			if why := h.whyNot(s.Name, plan); strings.HasPrefix(why, "does not fit") {
				t.Errorf("seed %d: %s: %s", seed, s.Name, why)
			}
		}
		if lo, hi, ok := longOutageStart(c); !ok || hi-lo < 10*time.Second {
			t.Fatalf("the long outage's start range at 60 s is %s..%s", lo, hi)
		}
	}
}

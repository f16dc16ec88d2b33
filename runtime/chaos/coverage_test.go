package chaos

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
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
			t.Errorf("seed %d: a 20 s plan with 4 kills lacks the long downtime or an upstream-aimed kill: %v", seed, p20)
		}
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

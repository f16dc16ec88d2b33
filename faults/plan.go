package faults

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Params says how often a fault fires and how big it is. What "often" and
// "big" mean depends on the kind:
//
//	crash                      Rate: probability per engine step
//	crash-after-*              Rate: probability per visit of the crash point
//	webhook-timeout/5xx/slow   Rate: probability per request to an affected bot;
//	                           slow: Max = how far past the timeout the bot answers
//	webhook-refused            Rate: probability per request that an outage starts;
//	                           Max = longest outage
//	webhook-duplicate          Rate: probability per request that it arrives twice
//	upstream-duplicate         Rate: probability per batch; Max = longest redelivery delay
//	upstream-reorder           Rate: probability per batch
//	clock-offset               Max = largest |offset| of a node's clock (drawn per boot)
//	clock-drift                Max = largest gain or loss per simulated hour
//	store-error/ambiguous      Rate: probability per store call (ambiguous: per write)
//	membership-churn           Rate: probability per simulated minute of one change
//	late-key                   Rate: probability that a bot starts without its key;
//	                           Max = latest publication (bounded by the fault window)
//	webhook-hang, result-lost  Rate: probability per request to an affected bot that
//	                           the engine is never told its outcome
//	webhook-4xx                Rate: probability per request that an episode starts;
//	                           Max = longest episode
//	webhook-late               Rate: probability per request to an affected bot that
//	                           it is answered only after the engine's expiry bound;
//	                           Max = how much later still
type Params struct {
	Rate float64       `json:"rate" yaml:"rate"`
	Max  time.Duration `json:"max,omitempty" yaml:"max"`
}

// Plan is the set of enabled faults of one run. A kind absent from Faults is
// disabled. Plans are plain values: write them as literals, Draw them, or
// ParsePlan them.
type Plan struct {
	Faults map[Kind]Params `json:"faults" yaml:"faults"`
}

// None is the plan with no faults.
func None() Plan { return Plan{Faults: map[Kind]Params{}} }

// Enabled reports whether k is part of the plan.
func (p Plan) Enabled(k Kind) bool {
	_, ok := p.Faults[k]
	return ok
}

// Get returns k's parameters (zero if disabled).
func (p Plan) Get(k Kind) Params { return p.Faults[k] }

// Rate is k's rate, 0 if disabled.
func (p Plan) Rate(k Kind) float64 { return p.Faults[k].Rate }

// Kinds returns the enabled kinds in All() order.
func (p Plan) Kinds() []Kind {
	var ks []Kind
	for _, k := range allKinds {
		if p.Enabled(k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// With returns a copy of p with k set to params.
func (p Plan) With(k Kind, params Params) Plan {
	q := Plan{Faults: make(map[Kind]Params, len(p.Faults)+1)}
	for kk, v := range p.Faults {
		q.Faults[kk] = v
	}
	q.Faults[k] = params
	return q
}

// The ranges a plan's parameters must lie in. They keep the simulator's
// integer clock arithmetic far from overflow and every draw meaningful: a
// node clock off by more than a day, or one that gains or loses more than
// half an hour per hour, tests nothing a smaller value does not.
const (
	MaxClockOffset = 24 * time.Hour   // clock-offset max, and a scheduled offset
	MaxClockDrift  = 30 * time.Minute // clock-drift max (gain or loss per hour)
	MaxDuration    = 24 * time.Hour   // every other kind's max
	// MaxClockDriftPPM is MaxClockDrift in parts per million.
	MaxClockDriftPPM = int64(MaxClockDrift) * 1_000_000 / int64(time.Hour)
)

// MaxFor is the largest Max kind k accepts.
func MaxFor(k Kind) time.Duration {
	switch k {
	case ClockOffset:
		return MaxClockOffset
	case ClockDrift:
		return MaxClockDrift
	}
	return MaxDuration
}

// Validate checks that every kind is known and every parameter in range
// (rate in [0, 1], a number; max in [0, MaxFor(kind)]).
func (p Plan) Validate() error {
	for _, k := range p.sortedKinds() {
		v := p.Faults[k]
		if !k.Valid() {
			return fmt.Errorf("fault plan: unknown kind %q", k)
		}
		// Written so that NaN fails too.
		if !(v.Rate >= 0 && v.Rate <= 1) {
			return fmt.Errorf("fault plan: %s rate %v is outside [0, 1]; give a probability like 0.05", k, v.Rate)
		}
		if v.Max < 0 || v.Max > MaxFor(k) {
			return fmt.Errorf("fault plan: %s max %v is outside [0, %v]", k, v.Max, MaxFor(k))
		}
	}
	return nil
}

// sortedKinds are the plan's kinds, known ones in All() order then any
// unknown ones by name, so Validate reports the same error every time.
func (p Plan) sortedKinds() []Kind {
	ks := p.Kinds()
	var unknown []string
	for k := range p.Faults {
		if !k.Valid() {
			unknown = append(unknown, string(k))
		}
	}
	sort.Strings(unknown)
	for _, u := range unknown {
		ks = append(ks, Kind(u))
	}
	return ks
}

// String renders the plan as ParsePlan reads it: "kind=rate[/max],...", in
// All() order, so equal plans print equally.
func (p Plan) String() string {
	var parts []string
	for _, k := range p.Kinds() {
		v := p.Faults[k]
		s := string(k) + "=" + strconv.FormatFloat(v.Rate, 'g', -1, 64)
		if v.Max != 0 {
			s += "/" + v.Max.String()
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParsePlan reads "kind=rate[/max],..." (or "none").
func ParsePlan(s string) (Plan, error) {
	p := None()
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return p, nil
	}
	seen := map[Kind]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Plan{}, fmt.Errorf("fault plan: %q is not kind=rate[/max]", part)
		}
		k, err := ParseKind(name)
		if err != nil {
			return Plan{}, err
		}
		// The last of two settings used to win silently: a plan that
		// says two things about one kind is a mistake to point out.
		if seen[k] {
			return Plan{}, fmt.Errorf("fault plan: %s is given twice; give each kind once", k)
		}
		seen[k] = true
		rateS, maxS, hasMax := strings.Cut(val, "/")
		var v Params
		if rateS != "" {
			if v.Rate, err = strconv.ParseFloat(rateS, 64); err != nil {
				return Plan{}, fmt.Errorf("fault plan: %s rate %q is not a number", k, rateS)
			}
		}
		if hasMax {
			if v.Max, err = time.ParseDuration(maxS); err != nil {
				return Plan{}, fmt.Errorf("fault plan: %s max %q is not a duration like 30s", k, maxS)
			}
		}
		p.Faults[k] = v
	}
	return p, p.Validate()
}

// Draw is swarm testing: from seed alone it enables a random subset of the
// kinds (each with probability one half) with random rates. Different kinds
// interact differently, and a plan that enables only some of them explores
// corners that "everything at once" drowns out.
func Draw(seed uint64) Plan {
	r := rand.New(rand.NewPCG(seed, nameHash("faults.Draw")))
	p := None()
	for _, k := range allKinds {
		// Always draw the parameters, enabled or not, so that one kind's
		// coin never shifts another kind's numbers.
		on := r.Float64() < 0.5
		v := drawParams(r, k)
		if on {
			p.Faults[k] = v
		}
	}
	return p
}

func drawParams(r *rand.Rand, k Kind) Params {
	between := func(lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	switch k {
	case Crash:
		return Params{Rate: between(0.0005, 0.006)}
	case CrashAfterStoreWrite, CrashAfterSend, CrashAfterProcess:
		return Params{Rate: between(0.003, 0.03)}
	case WebhookTimeout, Webhook5xx:
		return Params{Rate: between(0.02, 0.25)}
	case WebhookSlow:
		return Params{Rate: between(0.02, 0.2), Max: dur(time.Second, time.Minute)}
	case WebhookRefused:
		return Params{Rate: between(0.01, 0.08), Max: dur(30*time.Second, 20*time.Minute)}
	case WebhookDuplicate:
		return Params{Rate: between(0.02, 0.2)}
	case UpstreamDuplicate:
		return Params{Rate: between(0.02, 0.2), Max: dur(time.Second, 5*time.Minute)}
	case UpstreamReorder:
		return Params{Rate: between(0.05, 0.5)}
	case ClockOffset:
		return Params{Max: dur(time.Second, 2*time.Minute)}
	case ClockDrift:
		return Params{Max: dur(100*time.Millisecond, 5*time.Second)}
	case StoreError:
		return Params{Rate: between(0.003, 0.04)}
	case StoreAmbiguous:
		return Params{Rate: between(0.003, 0.04)}
	case MembershipChurn:
		return Params{Rate: between(0.05, 0.5)}
	case LateKey:
		return Params{Rate: between(0.2, 0.8), Max: dur(time.Minute, 90*time.Minute)}
	case Webhook4xx:
		// An episode: every request to the bot answered one 4xx for up to
		// Max (or until the heal).
		return Params{Rate: between(0.005, 0.05), Max: dur(10*time.Second, 10*time.Minute)}
	case WebhookLate:
		// Like a hang, it costs its message a lease and up to a cleanup
		// interval; the answer comes up to Max after that.
		return Params{Rate: between(0.01, 0.1), Max: dur(time.Second, 2*time.Minute)}
	case WebhookHang, ResultLost:
		// Each costs its message a lease and up to a cleanup interval
		// (the engine's expiry), so they stay rarer than timeouts.
		return Params{Rate: between(0.01, 0.1)}
	}
	return Params{}
}

// nameHash is FNV-1a of name: the second PCG word of a named random stream.
func nameHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

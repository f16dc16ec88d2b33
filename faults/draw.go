package faults

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Chance is a fault that fires by chance: at every site of its kind and
// target during the fault window, with probability Rate, its size drawn up
// to Max from the site's own random stream (Params documents both per
// kind). Clock kinds roll no coin: they apply at every boot. When a chance
// fires, the simulator records the Fault it became, exactly, so the run can
// be replayed and reduced without any dice.
type Chance struct {
	Kind Kind
	// The target: Node (crashes, clocks, store calls), Bot (webhook
	// faults), Stream (upstream faults); membership-churn names none (it
	// draws its stream and bot as it fires).
	Node, Bot, Stream string
	Rate              float64
	Max               time.Duration
}

// Matches reports whether the chance applies at s: same kind, and the
// target it names (a field it leaves empty matches any).
func (c Chance) Matches(s Site) bool { return c.Kind == s.Kind && c.targets(&s) }

// targets is Matches without the kind: each target field empty or equal.
func (c *Chance) targets(s *Site) bool {
	return (c.Node == "" || c.Node == s.Node) && (c.Bot == "" || c.Bot == s.Bot) && (c.Stream == "" || c.Stream == s.Stream)
}

// Schedule is everything a run may inject, decided before it starts (as a
// metamorphic test generator writes its ops file first): exact faults that
// fire where they say, and chances rolled at sites during the fault window.
type Schedule struct {
	Faults  []Fault
	Chances []Chance
}

// Chance returns the schedule's chance for kind k at the target of s, if
// any.
func (s Schedule) Chance(site Site) (Chance, bool) {
	for _, c := range s.Chances {
		if c.Matches(site) {
			return c, true
		}
	}
	return Chance{}, false
}

// ChanceIndex is a schedule's chances grouped by kind, each group in the
// schedule's order, so that a site's lookup scans only the chances of its
// kind (Schedule.Chance scans them all; a sweep looks one up at every
// store call, send and step). Its Chance answers exactly as the
// schedule's. The groups are few (one per kind the schedule holds), so
// they are a slice, scanned by kind.
type ChanceIndex struct {
	groups []chanceGroup
}

type chanceGroup struct {
	kind    Kind
	chances []Chance
}

// Index builds the schedule's ChanceIndex.
func (s Schedule) Index() ChanceIndex {
	var ix ChanceIndex
	for _, c := range s.Chances {
		i := slices.IndexFunc(ix.groups, func(g chanceGroup) bool { return g.kind == c.Kind })
		if i < 0 {
			i = len(ix.groups)
			ix.groups = append(ix.groups, chanceGroup{kind: c.Kind})
		}
		ix.groups[i].chances = append(ix.groups[i].chances, c)
	}
	return ix
}

// Chance returns the first chance of the schedule that matches site, as
// Schedule.Chance does.
func (ix ChanceIndex) Chance(site *Site) (Chance, bool) {
	for gi := range ix.groups {
		g := &ix.groups[gi]
		if g.kind != site.Kind {
			continue
		}
		for i := range g.chances {
			c := &g.chances[i]
			if c.targets(site) {
				return *c, true
			}
		}
		break
	}
	return Chance{}, false
}

// Has reports whether the schedule has a chance of kind k.
func (s Schedule) Has(k Kind) bool {
	for _, c := range s.Chances {
		if c.Kind == k {
			return true
		}
	}
	return false
}

// World names what a drawn schedule may target.
type World struct {
	Nodes   []string
	Bots    []string
	Streams []string
	// Window is the fault window: late keys are published within it.
	Window time.Duration
}

// webhookFailures are the webhook faults that make a bot unhealthy; each
// hits a random subset of the bots, never the reference bot.
var webhookFailures = []Kind{WebhookTimeout, Webhook5xx, WebhookRefused, WebhookSlow}

// lostOutcomes are the kinds whose requests are never answered to the
// engine (webhook-late's answer comes after the engine gave up), and
// client errors (webhook-4xx). They make a bot unhealthy too
// (its message waits a lease for the engine's expiry, or is refused for a
// while), and hit a subset of the bots drawn like
// webhookFailures' but from a stream of their own per kind, so a seed that
// enables one keeps every other draw of its schedule.
var lostOutcomes = []Kind{WebhookHang, ResultLost, Webhook4xx, WebhookLate}

// IsWebhookFailure reports whether k makes a bot unhealthy.
func IsWebhookFailure(k Kind) bool {
	return slices.Contains(webhookFailures, k) || slices.Contains(lostOutcomes, k)
}

// Schedule draws, from the seed and the plan, the explicit schedule of a
// run in world w: which bots each webhook failure affects (with two or more
// bots, one drawn reference bot is spared so head-of-line blocking stays
// measurable), when late keys are published, and one chance per enabled
// kind and target. Every draw comes from one stream of its own, in a fixed
// order, so a seed keeps its schedule as long as the kind list only grows
// at its end.
func (p Plan) Schedule(seed uint64, w World) Schedule {
	r := rand.New(rand.NewPCG(seed, nameHash("faults/assign")))
	ref := -1
	if len(w.Bots) >= 2 {
		ref = r.IntN(len(w.Bots))
	}
	affected := make([]map[Kind]bool, len(w.Bots))
	for i := range affected {
		affected[i] = map[Kind]bool{}
	}
	// assign gives kind k to each bot but ref with chance 0.6, and to one
	// of them at least.
	assign := func(k Kind, r *rand.Rand) {
		var candidates []int
		hit := false
		for i := range w.Bots {
			if i == ref {
				continue
			}
			candidates = append(candidates, i)
			if r.Float64() < 0.6 {
				affected[i][k] = true
				hit = true
			}
		}
		if len(candidates) > 0 && !hit {
			affected[candidates[r.IntN(len(candidates))]][k] = true
		}
	}
	for _, k := range webhookFailures {
		if p.Enabled(k) {
			assign(k, r)
		}
	}
	// The lost-outcome kinds came later: each draws from a stream of its
	// own, so that old seeds keep their assignments.
	for _, k := range lostOutcomes {
		if p.Enabled(k) {
			assign(k, rand.New(rand.NewPCG(seed, nameHash("faults/assign/"+string(k)))))
		}
	}
	var out Schedule
	for i, b := range w.Bots {
		if i != ref && p.Enabled(LateKey) && r.Float64() < p.Rate(LateKey) {
			latest := min(max(p.Get(LateKey).Max, time.Minute), w.Window)
			out.Faults = append(out.Faults, Fault{Kind: LateKey, Bot: b, At: Between(r, time.Second, latest)})
		}
	}
	add := func(k Kind, node, bot, stream string) {
		v := p.Get(k)
		out.Chances = append(out.Chances, Chance{Kind: k, Node: node, Bot: bot, Stream: stream, Rate: v.Rate, Max: v.Max})
	}
	for _, k := range allKinds {
		if !p.Enabled(k) {
			continue
		}
		switch {
		case k == LateKey:
			// drawn above as exact faults
		case IsWebhookFailure(k):
			for i, b := range w.Bots {
				if affected[i][k] {
					add(k, "", b, "")
				}
			}
		case TargetOf(k) == OnNode:
			for _, n := range w.Nodes {
				add(k, n, "", "")
			}
		case TargetOf(k) == OnBot:
			for _, b := range w.Bots {
				add(k, "", b, "")
			}
		case TargetOf(k) == OnStream:
			for _, s := range w.Streams {
				add(k, "", "", s)
			}
		default:
			add(k, "", "", "")
		}
	}
	return out
}

// Between draws a duration uniformly from [lo, hi].
func Between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	// The span in unsigned arithmetic: hi-lo may not fit in an int64 (the
	// fuzzer found a latency range of [-2^62, 2^62] panicking Int64N).
	// Uint64N draws exactly what Int64N drew for every span that fits.
	span := uint64(hi) - uint64(lo)
	if span == math.MaxUint64 {
		return lo + time.Duration(r.Uint64())
	}
	return lo + time.Duration(r.Uint64N(span+1))
}

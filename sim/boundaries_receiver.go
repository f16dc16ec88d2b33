package sim

import (
	"math/rand/v2"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The receiver's two windows, met on the path of real deliveries: the
// timestamp tolerance drawn across its valid range (it was the SDK's
// default in every world, so a receiver that ignored its configured
// tolerance passed), and the dedup window's end, where a duplicate just
// inside must be dropped and one at or past it handled again (only the
// once-a-run contract probe of settings.go read it, on a receiver of its
// own).

// Probe names of the receiver window boundaries (coverage catalogue).
const (
	CovTolDrawnPastBelow   = "boundary/receiver-tolerance-drawn/past/below"
	CovTolDrawnPastAt      = "boundary/receiver-tolerance-drawn/past/at"
	CovTolDrawnPastAbove   = "boundary/receiver-tolerance-drawn/past/above"
	CovTolDrawnFutureBelow = "boundary/receiver-tolerance-drawn/future/below"
	CovTolDrawnFutureAt    = "boundary/receiver-tolerance-drawn/future/at"
	CovTolDrawnFutureAbove = "boundary/receiver-tolerance-drawn/future/above"
	CovTolDrawnNearFloor   = "boundary/receiver-tolerance-drawn/near-the-clock-floor"
	CovDedupWindowBelow    = "boundary/receiver-dedup-window/below"
	CovDedupWindowAt       = "boundary/receiver-dedup-window/at"
	CovDedupWindowAbove    = "boundary/receiver-dedup-window/above"
)

var rxBoundaryProbes = []Probe{
	{CovTolDrawnPastBelow, "a receiver with a drawn (not the default) tolerance read a signed request a second or less inside it old"},
	{CovTolDrawnPastAt, "a receiver with a drawn tolerance read a signed request exactly that old (accepted)"},
	{CovTolDrawnPastAbove, "a receiver with a drawn tolerance read a signed request up to a second more than it old (a stale replay it must refuse)"},
	{CovTolDrawnFutureBelow, "a receiver with a drawn tolerance read a signed request stamped a second or less inside it ahead"},
	{CovTolDrawnFutureAt, "a receiver with a drawn tolerance read a signed request stamped exactly that far ahead (accepted)"},
	{CovTolDrawnFutureAbove, "a receiver with a drawn tolerance read a signed request stamped up to a second more than it ahead (it must refuse it)"},
	{CovTolDrawnNearFloor, "a stamp probe met a drawn tolerance under a minute (the least the world's clocks and bots allow)"},
	{CovDedupWindowBelow, "a bot's receiver read a duplicate, re-signed, a second or less before its dedup window ended (it must drop it)"},
	{CovDedupWindowAt, "a bot's receiver read a duplicate, re-signed, exactly its dedup window after the first handling (forgotten: handled again)"},
	{CovDedupWindowAbove, "a bot's receiver read a duplicate, re-signed, up to a second after its dedup window ended (handled again)"},
}

func rxBoundaries() []Boundary {
	return []Boundary{
		{"receiver tolerance, drawn (receiver.Config.Tolerance: 5 s to 4 h, at least the world's clock error and slowest bot)",
			"impl/receiver Handle: webhook.VerifyAt with the configured tolerance, both sides",
			[]string{CovTolDrawnPastBelow, CovTolDrawnPastAt, CovTolDrawnPastAbove,
				CovTolDrawnFutureBelow, CovTolDrawnFutureAt, CovTolDrawnFutureAbove, CovTolDrawnNearFloor}, ""},
		{"receiver dedup window (receiver.Config.Window; StoreDedup's MarkProcessed window)",
			"impl/receiver dedup.go live: now - seen < window; memstore/pgstore MarkProcessed: last seen > now - window",
			[]string{CovDedupWindowBelow, CovDedupWindowAt, CovDedupWindowAbove}, ""},
	}
}

// drawTolerance draws the bots' receiver tolerance across its valid range
// in half the worlds, from its own stream: near the least the world allows
// (Run raises it to that: raiseToleranceFloor), minutes, and hours. Zero
// keeps the SDK's default.
func drawTolerance(seed uint64, w *Workload) {
	r := actorRand(seed, "workload/receiver-tolerance")
	if r.IntN(2) != 0 {
		return
	}
	switch r.IntN(5) {
	case 0, 1:
		w.ReceiverTolerance = between(r, 5*time.Second, 2*time.Minute)
	case 2, 3:
		w.ReceiverTolerance = between(r, 2*time.Minute, 15*time.Minute)
	default:
		w.ReceiverTolerance = between(r, time.Hour, 4*time.Hour)
	}
	// Whole seconds, as a configuration writes it: stamps are whole
	// seconds, so only then does a stamp lie exactly at it ahead.
	w.ReceiverTolerance = w.ReceiverTolerance.Truncate(time.Second)
}

// raiseToleranceFloor gives a world with a tolerance set at least what its
// engine's signatures need to be accepted: a node's clock may be off by
// the plan's offset plus the drift gathered over the run, a stamp is
// whole seconds, and a bot reads a request up to its latency after it
// was signed. Below that a healthy bot would refuse every request of a
// skewed node, which no engine can mend.
func (w *Workload) raiseToleranceFloor(p faults.Plan) {
	if w.ReceiverTolerance <= 0 {
		return
	}
	floor := 2 * time.Second
	offsets := w.jumpFloor() // a clock stepped while running (clockjumps.go)
	if v, ok := p.Faults[faults.ClockOffset]; ok {
		offsets = max(offsets, v.Max)
	}
	floor += offsets
	if v, ok := p.Faults[faults.ClockDrift]; ok {
		hours := (w.FaultWindow + w.Liveness + time.Hour - 1) / time.Hour
		floor += v.Max * (hours + 1)
	}
	slowest := time.Duration(0)
	for _, b := range w.Bots {
		slowest = max(slowest, b.LatencyMax)
	}
	floor += slowest
	w.ReceiverTolerance = max(w.ReceiverTolerance, (floor+time.Second-1)/time.Second*time.Second)
}

// rxTolerance is the tolerance the bots' receivers run with.
func (s *sim) rxTolerance() time.Duration {
	if s.w.ReceiverTolerance > 0 {
		return s.w.ReceiverTolerance
	}
	return receiver.DefaultTolerance
}

// stampEdge classifies a stamp probe's read against the receivers'
// tolerance, and against a drawn one apart.
func (b *edges) stampEdge(o *oracle.Observation) {
	tol := b.c.s.rxTolerance()
	drawn := tol != receiver.DefaultTolerance
	d := time.Unix(o.Stamp, 0).Sub(o.Time)
	var hit, dhit string
	if d <= 0 {
		hit = edge(-d, tol, CovTolPastBelow, CovTolPastAt, CovTolPastAbove)
		dhit = edge(-d, tol, CovTolDrawnPastBelow, CovTolDrawnPastAt, CovTolDrawnPastAbove)
	} else {
		hit = edge(d, tol, CovTolFutureBelow, CovTolFutureAt, CovTolFutureAbove)
		dhit = edge(d, tol, CovTolDrawnFutureBelow, CovTolDrawnFutureAt, CovTolDrawnFutureAbove)
	}
	b.hit(hit)
	if drawn {
		b.hit(dhit)
		if tol < time.Minute {
			b.hit(CovTolDrawnNearFloor)
		}
	}
}

// dedupEdges are where a dedup probe reads its duplicate against the end
// of the window: a second and a nanosecond inside, exactly at it (the
// first instant the id is forgotten), a nanosecond and a second past it.
var dedupEdges = [...]time.Duration{-time.Second, -time.Nanosecond, 0, time.Nanosecond, time.Second}

// dedupProbeRate: how often a handled request, of a bot that has had no
// dedup probe yet, gets one.
const dedupProbeRate = 0.05

// maybeDedupProbe, for a request sd that b's receiver has just handled
// (first handling: its dedup entry starts now), has the same request read
// by b's receiver again at an edge of its dedup window, signed anew then
// as an engine's retry is: once a run, when the edge falls before the
// heal (short windows only; the default is a day), so that the probe
// does not keep a world that has settled running.
// The oracle's exact dedup model judges the answer (receiver-dedup-bounds)
// like any other delivery's.
func (s *sim) maybeDedupProbe(b *bot, sd engine.Send, seq int64) {
	if s.dedupProbed || sd.Snapshot || s.cfg.Bugs.NoReceiverDedup {
		return
	}
	if b.drng == nil {
		b.drng = s.actorRand("bot/" + b.spec.ID + "/dedup-probe")
	}
	if b.drng.Float64() >= dedupProbeRate {
		return
	}
	window := s.w.ReceiverWindow
	if window <= 0 {
		window = receiver.DefaultWindow
	}
	d := window + dedupEdges[b.drng.IntN(len(dedupEdges))]
	at := s.now.Add(d)
	if at.After(s.healAt) {
		return // it would keep an idle world running
	}
	s.dedupProbed = true
	s.inflight++
	s.at(at, func() {
		s.inflight--
		again := sd
		again.Timestamp = s.now.Unix()
		again.Signature = webhook.Sign(b.spec.Secret, sd.EventID, again.Timestamp, sd.Body)
		s.rec(b.actor, "dedup-probe", "event", sd.EventID, "after", d)
		s.cov.bnd.hit(edge(d, window, CovDedupWindowBelow, CovDedupWindowAt, CovDedupWindowAbove))
		s.process(b, again, seq, 0, nil)
	})
}

// dedupProbe is a bot's dedup probe draws.
type dedupProbe struct {
	drng *rand.Rand
}

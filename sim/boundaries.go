package sim

import (
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The boundary catalogue: every setting and size that a branch of the
// reference engine (impl/engine), the receiver SDK (impl/receiver) or
// Standard Webhooks verification (impl/webhook) compares against, and the
// coverage probes that say a run met it just below, exactly at and just
// above. A bug there is an off-by-one that only a world at the boundary
// shows; a probe no seed reaches fails `sweep --require-coverage` like
// every other situation of the catalogue. Where a boundary has no probe
// yet, Probes is empty and Gap says why: the list is the honest state,
// not a wish.

// Boundary is one compared-against setting or size.
type Boundary struct {
	Setting string   // the setting (yaml key) or size
	Where   string   // the comparison, file and what it decides
	Probes  []string // the coverage probes that reach it (below, at, above)
	Gap     string   // when a side has no probe: why
}

// Boundary probe names (coverage catalogue).
const (
	CovTolPastBelow   = "boundary/receiver-tolerance/past/below"
	CovTolPastAt      = "boundary/receiver-tolerance/past/at"
	CovTolPastAbove   = "boundary/receiver-tolerance/past/above"
	CovTolFutureBelow = "boundary/receiver-tolerance/future/below"
	CovTolFutureAt    = "boundary/receiver-tolerance/future/at"
	CovTolFutureAbove = "boundary/receiver-tolerance/future/above"

	CovTTLCutoffBefore = "boundary/ttl-cutoff/before"
	CovTTLCutoffAt     = "boundary/ttl-cutoff/at"
	CovTTLCutoffAfter  = "boundary/ttl-cutoff/after"

	CovSkewZero      = "boundary/clock-skew-budget/zero"
	CovSkewKeptByIt  = "boundary/clock-skew-budget/kept-by-the-budget"
	CovSkewBeyondTTL = "boundary/clock-skew-budget/deleted-past-ttl-plus-budget"
	CovCapBelow      = "boundary/retention-max/below"
	CovCapAt         = "boundary/retention-max/at"
	CovCapAbove      = "boundary/retention-max/above"
	CovAttemptsBelow = "boundary/max-attempts/below"
	CovAttemptsAt    = "boundary/max-attempts/at"
	CovAttemptsAbove = "boundary/max-attempts/above"
	CovInFlightBelow = "boundary/max-in-flight-per-bot/below"
	CovInFlightAt    = "boundary/max-in-flight-per-bot/at"
	CovBreakerBelow  = "boundary/breaker-failures/below"
	CovBreakerAt     = "boundary/breaker-failures/at"
	CovBreakerAbove  = "boundary/breaker-failures/above"
	CovCursorsWide   = "boundary/streams-per-cursor-write/wide"
	CovCursorsFive   = "boundary/streams-per-cursor-write/five-or-more"
)

var boundaryProbes = append([]Probe{
	{CovTolPastBelow, "a receiver read a correctly signed request whose webhook-timestamp was a second or less inside its tolerance old"},
	{CovTolPastAt, "a receiver read a correctly signed request exactly its tolerance old (the Standard Webhooks rule still accepts it)"},
	{CovTolPastAbove, "a receiver read a correctly signed request up to a second more than its tolerance old (a stale replay it must refuse)"},
	{CovTolFutureBelow, "a receiver read a correctly signed request stamped a second or less inside its tolerance ahead of its clock"},
	{CovTolFutureAt, "a receiver read a correctly signed request stamped exactly its tolerance ahead of its clock (still accepted)"},
	{CovTolFutureAbove, "a receiver read a correctly signed request stamped up to a second more than its tolerance ahead (it must refuse it)"},
	{CovTTLCutoffBefore, "a TTL cleanup deleted a message created within 1s before the cutoff the store was given"},
	{CovTTLCutoffAt, "a TTL cleanup met a message created exactly at the cutoff the store was given (it must stay)"},
	{CovTTLCutoffAfter, "a TTL cleanup kept a message created within 1s after the cutoff the store was given"},
	{CovSkewZero, "a TTL cleanup deleted messages with a clock-skew budget of zero (the store's cutoff is the TTL itself)"},
	{CovSkewKeptByIt, "a TTL cleanup kept an unleased message older than the TTL by the cleaner's clock only because of the skew budget"},
	{CovSkewBeyondTTL, "a TTL cleanup deleted a message older than the TTL plus a positive skew budget"},
	{CovCapBelow, "a cap cleanup found a bot holding one message less than the cap"},
	{CovCapAt, "a cap cleanup found a bot holding exactly the cap"},
	{CovCapAbove, "a cap cleanup found a bot holding exactly one message more than the cap"},
	{CovAttemptsBelow, "a message failed one attempt less than max_attempts and its next request was answered 2xx"},
	{CovAttemptsAt, "a message was dead-lettered after exactly max_attempts failures"},
	{CovAttemptsAbove, "a message failed more than max_attempts times over its lifetimes (a requeued dead letter failed again)"},
	{CovInFlightBelow, "a node had one request less than max_in_flight_per_bot to one bot unanswered"},
	{CovInFlightAt, "a node had max_in_flight_per_bot requests to one bot unanswered"},
	{CovBreakerBelow, "a bot failed one time less in a row than breaker_failures, then answered 2xx (its breaker stays closed)"},
	{CovBreakerAt, "a node was told exactly breaker_failures failures in a row of one bot (its breaker opens)"},
	{CovBreakerAbove, "a node was told a failure of a bot it had already been told breaker_failures failures in a row of"},
	{CovCursorsWide, "one conditional cursor write (AdvanceCursors) named at least 100 streams"},
	{CovCursorsFive, "one conditional cursor write (AdvanceCursors) named more streams than the whole of a small world has (5 or more)"},
}, append(listBoundaryProbes, rxBoundaryProbes...)...)

// Boundaries lists the catalogue, in the order of the issue that asked
// for it: tolerances, batch and page sizes, retention, the skew budget,
// lease, attempts, in-flight limits, lookback, the dedup window, others.
func Boundaries() []Boundary {
	return append([]Boundary{
		{"receiver tolerance (past side; webhook.DefaultTolerance, receiver.Config.Tolerance)",
			"impl/webhook Verify: now - stamp > tolerance refuses (400, too old)",
			[]string{CovTolPastBelow, CovTolPastAt, CovTolPastAbove}, ""},
		{"receiver tolerance (future side)",
			"impl/webhook Verify: stamp > now + tolerance refuses (400, too new)",
			[]string{CovTolFutureBelow, CovTolFutureAt, CovTolFutureAbove}, ""},
		{"retention_ttl at the store's cutoff (now - retention_ttl - clock_skew_budget)",
			"impl/engine maintain: the cutoff; the store's DeleteExpired deletes created < cutoff",
			[]string{CovTTLCutoffBefore, CovTTLCutoffAt, CovTTLCutoffAfter}, ""},
		{"clock_skew_budget",
			"impl/engine maintain: subtracted from the TTL cutoff",
			[]string{CovSkewZero, CovSkewKeptByIt, CovSkewBeyondTTL}, ""},
		{"retention_max", "impl/engine maintain: TrimPerSubscriber(RetentionMax); engine.go's list trim j-i > RetentionMax",
			[]string{CovCapBelow, CovCapAt, CovCapAbove}, ""},
		{"max_attempts", "impl/engine queue.go Fail(MaxAttempts); memstore Attempts >= max dead-letters; snapshot.go attempts >= MaxAttempts",
			[]string{CovAttemptsBelow, CovAttemptsAt, CovAttemptsAbove}, ""},
		{"max_in_flight_per_bot", "impl/engine queue.go: free slots = MaxInFlightPerBot - in flight; Claim Limit",
			[]string{CovInFlightBelow, CovInFlightAt},
			"above: a correct engine never gets there (in-flight-limit judges it)"},
		{"breaker_failures", "impl/engine breaker.go: failures >= BreakerFailures opens",
			[]string{CovBreakerBelow, CovBreakerAt, CovBreakerAbove}, ""},
		{"streams per cursor write (no cap in the reference engine; a store or engine that batches them has one)",
			"impl/engine streams.go writeCursorsSync: one AdvanceCursors with every moved stream",
			[]string{CovCursorsFive, CovCursorsWide}, "below and at a cap: the reference has none to name"},
		{"lease", "impl/engine engine.go expireRequests: sentAt + Lease not after now gives a request up (leaseedges.go)",
			[]string{CovLeaseBelow, CovLeaseAt, CovLeaseAbove, CovLeaseExpired}, ""},
		{"lease at the store (Claim: lease_until > now stays leased)", "impl/memstore, impl/pgstore Claim",
			[]string{CovLeaseAt},
			"below and above: not probed apart; the claim that follows an expiry at exactly the lease meets lease_until == now"},
		{"breaker_open_for / breaker_close_after", "impl/engine breaker.go: openUntil, successes >= BreakerCloseAfter",
			[]string{CovHalfOpenFails, CovHalfOpenSucceeds}, "exact edges not yet probed"},
		{"timestamp_lookback", "impl/engine streams.go subscribe: Since = cursor - lookback; the upstream replays stamps >= Since",
			[]string{CovLookbackOutside, CovLookbackAt, CovLookbackInside, CovLateBelowCursor}, ""},
		{"receiver max entries (dedup)", "impl/receiver dedup.go: len(index) >= maxEntries evicts",
			[]string{CovBeyondWindow}, "exact edges not yet probed (the window's: receiver dedup window, below)"},
		{"receiver max body", "impl/receiver http.go: body > MaxBody answers 413",
			nil, "probed by settings-validation only (sim/settings.go)"},
		{"webhook_timeout, cleanup_interval, store_retry, ack_delay, initial/max_backoff",
			"timers (now + setting), not comparisons; retry-backoff and the prompt checks judge them",
			nil, "timers: no below/at/above situation"},
	}, append(listBoundaries(), rxBoundaries()...)...)
}

// edges follows what the boundary probes need beyond coverage's own
// bookkeeping.
type edges struct {
	c        *coverage
	fails    map[impl.MessageKey]int // failures told in the message's lifetime
	total    map[impl.MessageKey]int // over all its lifetimes
	inflight map[[2]string]int       // node, bot -> requests unanswered

	fullClaims int // claims that filled their page (boundaries_lists.go)
	longHeld   int // rows LongBot held at its last full claim read back
}

func newEdges(c *coverage) *edges {
	return &edges{c: c, fails: map[impl.MessageKey]int{}, total: map[impl.MessageKey]int{}, inflight: map[[2]string]int{}}
}

// edge classifies d against limit: just below (within a second), at,
// just above (within a second), or none.
func edge(d, limit time.Duration, below, at, above string) string {
	switch {
	case d == limit:
		return at
	case d < limit && d >= limit-time.Second:
		return below
	case d > limit && d <= limit+time.Second:
		return above
	}
	return ""
}

func (b *edges) hit(name string) {
	if name != "" {
		b.c.hit(name)
	}
}

func (b *edges) see(o *oracle.Observation) {
	cfg := &b.c.s.ecfg
	switch o.Kind {
	case oracle.ObsStampProbe:
		b.stampEdge(o)
	case oracle.ObsCleanup:
		if o.Rule == "ttl" {
			b.ttl(o, cfg.RetentionTTL, cfg.ClockSkewBudget)
		} else {
			b.capped(o, cfg.RetentionMax)
		}
	case oracle.ObsSend:
		if o.Snapshot {
			return
		}
		k := [2]string{o.Node, o.Bot}
		b.inflight[k]++
		switch b.inflight[k] {
		case cfg.MaxInFlightPerBot:
			b.hit(CovInFlightAt)
		case cfg.MaxInFlightPerBot - 1:
			b.hit(CovInFlightBelow)
		}
	case oracle.ObsResult:
		if o.Snapshot {
			return
		}
		k := impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID}
		if o.OK {
			if b.fails[k] == cfg.MaxAttempts-1 && cfg.MaxAttempts > 1 {
				b.hit(CovAttemptsBelow)
			}
			delete(b.fails, k)
			return
		}
		b.fails[k]++
		if b.total[k]++; b.total[k] > cfg.MaxAttempts {
			b.hit(CovAttemptsAbove)
		}
	case oracle.ObsDead:
		if k := (impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID}); b.fails[k] == cfg.MaxAttempts {
			b.hit(CovAttemptsAt)
		}
	case oracle.ObsRequeued:
		delete(b.fails, impl.MessageKey{Subscriber: o.Bot, EventID: o.EventID})
	case oracle.ObsNodeDown:
		for k := range b.inflight {
			if k[0] == o.Node {
				delete(b.inflight, k)
			}
		}
	}
}

// answered: node's request to bot was answered (or given up on).
func (b *edges) answered(node, bot string) {
	k := [2]string{node, bot}
	if b.inflight[k] > 0 {
		b.inflight[k]--
	}
}

// ttl: where the messages a TTL cleanup met lie against the store's
// cutoff, and what the skew budget kept or let go.
func (b *edges) ttl(o *oracle.Observation, ttl, budget time.Duration) {
	for _, ms := range [][]impl.Message{o.Deleted, o.Remaining} {
		for i := range ms {
			b.hit(edge(ms[i].CreatedAt.Sub(o.Cutoff), 0, CovTTLCutoffBefore, CovTTLCutoffAt, CovTTLCutoffAfter))
		}
	}
	if len(o.Deleted) > 0 {
		if budget == 0 {
			b.hit(CovSkewZero)
		} else {
			b.hit(CovSkewBeyondTTL)
		}
	}
	if budget > 0 {
		byTTL := o.Clock.Add(-ttl)
		for i := range o.Remaining {
			m := &o.Remaining[i]
			if m.CreatedAt.Before(byTTL) && !m.CreatedAt.Before(o.Cutoff) && !m.LeaseUntil.After(o.Clock) {
				b.hit(CovSkewKeptByIt)
				break
			}
		}
	}
}

// capped: how many messages each bot held when a cap cleanup ran.
func (b *edges) capped(o *oracle.Observation, max int) {
	held := map[string]int{}
	for _, ms := range [][]impl.Message{o.Deleted, o.Remaining} {
		for i := range ms {
			held[ms[i].Subscriber]++
		}
	}
	for _, n := range held {
		switch n {
		case max - 1:
			b.hit(CovCapBelow)
		case max:
			b.hit(CovCapAt)
		case max + 1:
			b.hit(CovCapAbove)
		}
	}
}

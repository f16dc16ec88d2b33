package oracle

import (
	"slices"
	"time"
)

// breaker-policy (seed 001, SPEC "Per-bot circuit breaker"): each engine
// node keeps a breaker per bot, in memory (a restart closes it). After
// BreakerFailures consecutive failed attempts the node has been told of,
// it sends that bot nothing for BreakerOpenFor by its clock (open defers);
// then it is half-open and has at most one request of its own making in
// flight until it has been told of BreakerCloseAfter successes (closed
// again) or of a failure (open again). Snapshot notifications are not
// webhook deliveries to the bot's queue and are outside the breaker.
//
// Everything is judged from what a node sent and what it was told, by its
// own clock (ObsSend and ObsResult with Clock): never from the engine's
// notes. Where the observations leave the engine's state open, the check
// gives up on that breaker until the node restarts rather than guess:
//   - a result told within chkTimeSlack after the open period ends may
//     reach the engine before or after its half-open timer;
//   - a result told a lease or more after its send may find the request
//     expired (the engine no longer waits for it);
//   - likewise a half-open probe that will never be answered
//     (OutcomeLost) stops holding the probe slot a lease after its send.
//
// A node may send one message more than once (a copy sent directly beside
// a queued one, or a later claim of it). Whether the answer to an earlier
// request counts is the engine's business (it may have superseded it), so
// such a result is uncertain: the check keeps the least
// and the most consecutive failures the engine can have counted, and
// judges the opening only when both reach BreakerFailures together.
type chkBreaker struct {
	state     chkBreakerState
	lo, hi    int            // consecutive failures told, while closed: the least and most the engine may count
	until     time.Time      // open: when it may half-open (node clock)
	probeReqs map[int64]bool // half-open: requests sent since it half-opened, not yet answered
	successes int            // half-open
}

type chkBreakerState uint8

const (
	chkBrClosed chkBreakerState = iota
	chkBrOpen
	chkBrHalf
	chkBrUnknown // the observations no longer determine the engine's state
)

// chkNodeBot names a (node, bot) pair by interned names (checker.nb).
type chkNodeBot struct{ node, bot *chkNodeRef }

// nb is the chkNodeBot of (node, bot).
func (c *checker) nb(node, bot string) chkNodeBot {
	return chkNodeBot{c.nodeRefs.ref(node), c.botRefs.ref(bot)}
}

// chkSent is a request a node sent, and when (its clock).
type chkSent struct {
	req int64
	at  time.Time
}

func (c *checker) breakerJudged() bool {
	return c.p.BreakerFailures > 0 && c.p.BreakerOpenFor > 0 && c.p.BreakerCloseAfter > 0
}

func (c *checker) breakerOf(node, bot string) *chkBreaker {
	k := c.nb(node, bot)
	b := c.breakers[k]
	if b == nil {
		b = &chkBreaker{} // probeReqs: made when it first half-opens
		c.breakers[k] = b
	}
	return b
}

func (b *chkBreaker) open(at time.Time, d time.Duration) {
	b.state, b.lo, b.hi, b.until, b.successes = chkBrOpen, 0, 0, at.Add(d), 0
	clear(b.probeReqs)
}

// breakerSend judges a non-snapshot send of node o.Node to o.Bot, whose
// breaker is b (breakerStep: the send is judged).
func (c *checker) breakerSend(o *Observation, b *chkBreaker) {
	nk := c.nk(o.Node, c.key(o.Bot, o.EventID))
	nk.brOut = append(nk.brOut, chkSent{o.Request, o.Clock})
	switch b.state {
	case chkBrOpen:
		if o.Clock.Before(b.until.Add(-chkTimeSlack)) {
			c.report(InvBreakerPolicy, o.Bot, o.EventID, "",
				"node %s sent to %s at %s by its clock while its breaker was open (it opened after %d consecutive failures and may half-open at %s, %s later)",
				o.Node, o.Bot, o.Clock.UTC().Format(time.RFC3339Nano), c.p.BreakerFailures,
				b.until.UTC().Format(time.RFC3339Nano), b.until.Sub(o.Clock))
			b.state = chkBrUnknown // one report per opening
			return
		}
		b.state, b.successes = chkBrHalf, 0
		clear(b.probeReqs)
		fallthrough
	case chkBrHalf:
		for req := range b.probeReqs {
			// A probe whose answer will never come stops counting once
			// the engine may have expired it (a lease after its send).
			if at, ok := c.brLost[req]; ok && !o.Clock.Before(at.Add(c.p.Lease-chkTimeSlack)) {
				delete(b.probeReqs, req)
			}
		}
		if len(b.probeReqs) >= 1 {
			c.report(InvBreakerPolicy, o.Bot, o.EventID, "",
				"node %s sent a second request to %s while its breaker was half-open (the first is unanswered; %d of %d successes told)",
				o.Node, o.Bot, b.successes, c.p.BreakerCloseAfter)
			b.state = chkBrUnknown
			return
		}
		if b.probeReqs == nil {
			b.probeReqs = map[int64]bool{}
		}
		b.probeReqs[o.Request] = true
	}
}

// breakerResult books what node o.Node was told of its request o.Request;
// b is the node's breaker for o.Bot (breakerStep: the result is judged).
func (c *checker) breakerResult(o *Observation, b *chkBreaker) {
	nk := c.nk(o.Node, c.key(o.Bot, o.EventID))
	out := nk.brOut
	i := slices.IndexFunc(out, func(s chkSent) bool { return s.req == o.Request })
	if i < 0 {
		return
	}
	sentAt := out[i].at
	// A later request for the message, answered or not, may have
	// superseded this one in the engine (seed 558: a claim resent a
	// message whose first request timed out only after the resend).
	certain := nk.lastReq == o.Request
	if out = slices.Delete(out, i, i+1); len(out) == 0 {
		nk.brOut = nil
	} else {
		nk.brOut = out
	}
	if b.state == chkBrUnknown {
		return
	}
	if o.Clock.Sub(sentAt) >= c.p.Lease-chkTimeSlack {
		b.state = chkBrUnknown // the engine may have given up on the request
		return
	}
	if b.state == chkBrOpen {
		switch {
		case o.Clock.Before(b.until):
			return // told while open: changes nothing
		case !o.Clock.After(b.until.Add(chkTimeSlack)):
			b.state = chkBrUnknown // before or after the half-open timer
			return
		}
		b.state, b.successes = chkBrHalf, 0
		clear(b.probeReqs)
	}
	switch b.state {
	case chkBrClosed:
		switch {
		case o.OK && certain:
			b.lo, b.hi = 0, 0
		case o.OK:
			b.lo = 0
		case certain:
			b.lo++
			b.hi++
		default:
			b.hi++
		}
		switch {
		case b.lo >= c.p.BreakerFailures:
			b.open(o.Clock, c.p.BreakerOpenFor)
			c.brOpens[o.Node]++
		case b.hi >= c.p.BreakerFailures:
			b.state = chkBrUnknown // open or not, depending on what the engine counted
		}
	case chkBrHalf:
		if !certain {
			b.state = chkBrUnknown
			return
		}
		delete(b.probeReqs, o.Request)
		if !o.OK {
			b.open(o.Clock, c.p.BreakerOpenFor)
			c.brOpens[o.Node]++
			return
		}
		b.successes++
		if b.successes >= c.p.BreakerCloseAfter {
			b.state, b.lo, b.hi = chkBrClosed, 0, 0
		}
	}
}

// breakerLost books a request of o.Node whose answer will never reach it
// (OutcomeLost), with the node's clock when it sent it.
func (c *checker) breakerLost(o *Observation) {
	if !c.breakerJudged() {
		return
	}
	for _, s := range c.nk(o.Node, c.key(o.Bot, o.EventID)).brOut {
		if s.req == o.Request {
			c.brLost[o.Request] = s.at
		}
	}
}

// breakerReset forgets a node's breakers: a new incarnation starts closed.
func (c *checker) breakerReset(node string) {
	dropNode(c.breakers, node)
	c.dropNodePairs(node, func(p *chkNodePair) { p.brOut = nil })
	delete(c.brOpens, node)
}

package oracle

import (
	"math"
	"time"
)

// Jitter (retry-backoff): the policy spreads each retry over
// [base(n), base(n) + JitterFraction*base(n)) so that the retries of many
// messages that failed together do not arrive together (SPEC: "exponential
// backoff and jitter"). The bounds in failed accept a wait with no jitter
// at all, so an engine that never applies it passed every check.
//
// A wait is read here only where the engine's draw can be read exactly: a
// Fail recording a single failure the node was told at one instant
// (told.first is then the node's clock when told, the time the engine's
// backoff counts from). Its jitter is next - first - base(n). A correct
// engine draws it uniformly from [0, ceil(span)) nanoseconds, so landing
// on either end has probability 2/span, at most 2e-5 with span at least
// jitterMinSpan; jitterEndsToFail such waits among m read in one run happen
// to a correct engine with probability about m³/6 × 8e-15 (1e-9 at m =
// 100). An engine that draws no jitter (or always the most) lands on an end
// at every such Fail.
const (
	jitterEndsToFail = 3
	jitterMinSpan    = 100 * time.Microsecond
)

type jitterState struct {
	ends int // single-failure Fails whose wait sat exactly at an end of the jitter span
}

// jitterDrawn reads the jitter of a Fail that kept the backoff bounds.
func (c *checker) jitterDrawn(o *Observation, k chkKey, told chkTold, n int, next time.Time) {
	if c.p.JitterFraction <= 0 || !told.first.Equal(told.last) {
		return
	}
	base := c.backoffBase(n)
	span := math.Ceil(c.p.JitterFraction * float64(base))
	if span < float64(jitterMinSpan) {
		return
	}
	j := next.Sub(told.first) - base
	if j != 0 && j != time.Duration(span)-1 {
		return
	}
	c.jitter.ends++
	if c.jitter.ends < jitterEndsToFail {
		return
	}
	end := "top"
	if j == 0 {
		end = "bottom"
	}
	c.report(InvRetryBackoff, k.bot, k.event, "\x00jitter",
		"node %s set the next attempt of failure %d at %s after the failure reached it: the %s of the jitter span [%s, %s) of JitterFraction %v, "+
			"as %d single-failure retries of this run did; a uniform draw lands on an end of a span this wide with probability at most 2e-5 each: the jitter is not drawn",
		o.Node, n, next.Sub(told.first), end,
		base, base+time.Duration(span), c.p.JitterFraction, c.jitter.ends)
}

// Package bounds derives the checker's bounds from an engine
// configuration. The oracle (model/oracle) is engine-independent and takes
// plain numbers; the simulator and the real-process fault harness both run
// engines configured by engine.Config, and both must judge them by the
// numbers the engine was given, not by a copy that drifts.
package bounds

import (
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Of returns the checker's bounds for engines configured as c: every bound
// the engine promises (retries and their backoff, retention, lease,
// timeouts) is read from c, never restated; the receivers' timestamp
// tolerance is the receiver SDK's default; the rest (the checker's slack,
// the workload's liveness and head-of-line bounds, the dedup window, the
// healthy bots) are oracle.DefaultCheckParams until the caller sets them.
func Of(c engine.Config) oracle.CheckParams {
	p := oracle.DefaultCheckParams()
	p.MaxAttempts = c.MaxAttempts
	p.InitialBackoff, p.Multiplier, p.MaxBackoff, p.JitterFraction = c.InitialBackoff, c.Multiplier, c.MaxBackoff, c.JitterFraction
	p.RetentionTTL = c.RetentionTTL
	p.RetentionMax = c.RetentionMax
	p.CleanupInterval = c.CleanupInterval
	p.ClockSkewBudget = c.ClockSkewBudget
	p.Lease = c.Lease
	p.StoreRetry = c.StoreRetry
	p.WebhookTimeout = c.WebhookTimeout
	p.BreakerFailures, p.BreakerOpenFor, p.BreakerCloseAfter = c.BreakerFailures, c.BreakerOpenFor, c.BreakerCloseAfter
	p.TimestampLookback = c.TimestampLookback
	p.AckDelay = c.AckDelay
	p.MaxInFlightPerBot = c.MaxInFlightPerBot
	p.ReceiverTolerance = receiver.DefaultTolerance
	return p
}

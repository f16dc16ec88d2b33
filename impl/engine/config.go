package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// DefaultConfig returns the numbers of the source documents: seed 001 for
// retries and the breaker, seed 003 for retention, Standard Webhooks for the
// request shape. Node, Clock and Rand are left for the runtime to inject
// (Node gets a placeholder name).
func DefaultConfig() Config {
	return Config{
		Node: "node-1",

		MaxAttempts:    3,
		InitialBackoff: time.Second,
		Multiplier:     2,
		MaxBackoff:     30 * time.Second,
		JitterFraction: 0.3,

		BreakerFailures:   5,
		BreakerOpenFor:    60 * time.Second,
		BreakerCloseAfter: 3,

		RetentionTTL:    7 * 24 * time.Hour,
		RetentionMax:    1000,
		CleanupInterval: 5 * time.Minute,
		ClockSkewBudget: 5 * time.Minute,

		WebhookTimeout:    2 * time.Second,
		Lease:             30 * time.Second,
		MaxInFlightPerBot: 8,
		TimestampLookback: 10 * time.Minute,
		StoreRetry:        time.Second,

		CursorMode: CursorSync,
	}
}

// Validate reports the first thing wrong with c, phrased so that the fix is
// obvious.
func (c Config) Validate() error {
	var first error
	bad := func(format string, args ...any) {
		if first == nil {
			first = fmt.Errorf("engine config: "+format, args...)
		}
	}
	atLeastOne := func(name string, n int) {
		if n < 1 {
			bad("%s is %d; it must be at least 1", name, n)
		}
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("%s is %v; it must be positive", name, d)
		}
	}
	if c.Node == "" {
		bad("Node is empty; set it to this node's name (it is the lease owner in the store)")
	}
	if c.Clock == nil {
		bad("Clock is nil; inject the runtime's clock (the engine never reads time itself)")
	}
	if c.Rand == nil && c.JitterFraction > 0 {
		bad("Rand is nil but JitterFraction is %v; inject a seeded *rand.Rand or set JitterFraction to 0", c.JitterFraction)
	}
	atLeastOne("MaxAttempts", c.MaxAttempts)
	positive("InitialBackoff", c.InitialBackoff)
	if c.Multiplier < 1 || math.IsNaN(c.Multiplier) || math.IsInf(c.Multiplier, 0) {
		bad("Multiplier is %v; it must be a finite number >= 1", c.Multiplier)
	}
	if c.MaxBackoff < c.InitialBackoff {
		bad("MaxBackoff (%v) is below InitialBackoff (%v); raise MaxBackoff", c.MaxBackoff, c.InitialBackoff)
	}
	if c.JitterFraction < 0 || c.JitterFraction > 1 || math.IsNaN(c.JitterFraction) {
		bad("JitterFraction is %v; it must be between 0 and 1", c.JitterFraction)
	}
	atLeastOne("BreakerFailures", c.BreakerFailures)
	positive("BreakerOpenFor", c.BreakerOpenFor)
	atLeastOne("BreakerCloseAfter", c.BreakerCloseAfter)
	if c.ClockSkewBudget < 0 {
		bad("ClockSkewBudget is %v; it must not be negative", c.ClockSkewBudget)
	}
	positive("RetentionTTL", c.RetentionTTL)
	atLeastOne("RetentionMax", c.RetentionMax)
	positive("CleanupInterval", c.CleanupInterval)
	positive("WebhookTimeout", c.WebhookTimeout)
	if c.Lease <= c.WebhookTimeout {
		bad("Lease (%v) must exceed WebhookTimeout (%v), or a slow request's message is claimed twice", c.Lease, c.WebhookTimeout)
	}
	atLeastOne("MaxInFlightPerBot", c.MaxInFlightPerBot)
	if c.TimestampLookback < 0 {
		bad("TimestampLookback is %v; it must not be negative", c.TimestampLookback)
	}
	positive("StoreRetry", c.StoreRetry)
	if c.CursorMode != CursorSync && c.CursorMode != CursorAsync {
		bad("CursorMode is %d; use CursorSync or CursorAsync", c.CursorMode)
	}
	if c.HandOff != HandOffQueued && c.HandOff != HandOffDirect {
		bad("HandOff is %d; use HandOffQueued or HandOffDirect", c.HandOff)
	}
	return first
}

// Backoff is the wait after failed attempt n (1-based): base =
// min(InitialBackoff * Multiplier^(n-1), MaxBackoff), plus a jitter of
// floor(u * JitterFraction * base) nanoseconds, where u in [0, 1) is the
// draw. The result lies in [base, base + JitterFraction*base): strictly
// below the top, even where float rounding would reach it. It is exported
// so checkers can compute the exact bounds the engine promises.
func Backoff(c Config, attempt int, u float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	base := float64(c.InitialBackoff) * math.Pow(c.Multiplier, float64(attempt-1))
	if base > float64(c.MaxBackoff) || math.IsInf(base, 0) || math.IsNaN(base) {
		base = float64(c.MaxBackoff)
	}
	base = math.Round(base)
	span := c.JitterFraction * base
	j := math.Floor(u * span)
	if j >= span {
		j = math.Ceil(span) - 1
	}
	if j < 0 {
		j = 0
	}
	return time.Duration(base) + time.Duration(j)
}

// ErrNilStore is returned by New without a store.
var ErrNilStore = errors.New("engine: store is nil; pass an impl.Store (for example memstore.New())")

// New validates cfg and returns an engine bound to store. Feed it Start
// before anything else.
func New(cfg Config, store impl.Store) (*Engine, error) {
	if store == nil {
		return nil, ErrNilStore
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newEngine(cfg, store), nil
}

package bounds

import (
	"reflect"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Every field of the checker's bounds that mirrors an engine setting is
// derived from the engine's configuration: change any engine number and
// the bound follows. (oracle.DefaultCheckParams still carries its own
// copy for callers without an engine configuration; it must agree.)
func TestCheckParamsFollowTheEngine(t *testing.T) {
	def := engine.DefaultConfig()
	got, want := Of(def), oracle.DefaultCheckParams()
	// Known difference: oracle.DefaultCheckParams has no clock skew
	// budget (0: the strictest TTL check) where the engine's default is
	// 5m; the simulator always passes the engine's.
	got.ClockSkewBudget = want.ClockSkewBudget
	if !reflect.DeepEqual(got, want) {
		t.Errorf("oracle.DefaultCheckParams disagrees with engine.DefaultConfig:\n got %+v\nwant %+v", got, want)
	}
	c := def
	c.MaxAttempts, c.InitialBackoff, c.Multiplier, c.MaxBackoff, c.JitterFraction = 9, 3*time.Second, 3, time.Minute, 0.1
	c.RetentionTTL, c.RetentionMax, c.CleanupInterval, c.ClockSkewBudget = time.Hour, 7, time.Minute, time.Second
	c.Lease, c.StoreRetry, c.WebhookTimeout = time.Minute, 2*time.Second, 5*time.Second
	c.BreakerFailures, c.BreakerOpenFor, c.BreakerCloseAfter = 2, 7*time.Second, 4
	c.TimestampLookback = 3 * time.Minute
	c.AckDelay = 700 * time.Millisecond
	c.MaxInFlightPerBot = 3
	p := Of(c)
	gotB := []any{p.MaxAttempts, p.InitialBackoff, p.Multiplier, p.MaxBackoff, p.JitterFraction,
		p.RetentionTTL, p.RetentionMax, p.CleanupInterval, p.ClockSkewBudget, p.Lease, p.StoreRetry, p.WebhookTimeout,
		p.BreakerFailures, p.BreakerOpenFor, p.BreakerCloseAfter, p.TimestampLookback, p.AckDelay, p.MaxInFlightPerBot}
	wantB := []any{c.MaxAttempts, c.InitialBackoff, c.Multiplier, c.MaxBackoff, c.JitterFraction,
		c.RetentionTTL, c.RetentionMax, c.CleanupInterval, c.ClockSkewBudget, c.Lease, c.StoreRetry, c.WebhookTimeout,
		c.BreakerFailures, c.BreakerOpenFor, c.BreakerCloseAfter, c.TimestampLookback, c.AckDelay, c.MaxInFlightPerBot}
	if !reflect.DeepEqual(gotB, wantB) {
		t.Errorf("bounds not derived from the engine config:\n got %v\nwant %v", gotB, wantB)
	}
}

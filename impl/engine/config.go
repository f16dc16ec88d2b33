package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Config is the engine's configuration. Defaults (DefaultConfig) are the
// seeds' numbers.
//
// This file is the one place of an engine setting: its field (with its
// yaml key, which is how scenario files and any other YAML configuration
// name it), its default in DefaultConfig, and its rule in Validate. The
// scenario loader decodes every field with a yaml key, the simulator hands
// the whole of it to each node, and the checker's bounds are derived from
// it (sim's checkParams); so exposing a setting is this file and its line
// in scenarios/SCHEMA.md. Fields with the key "-" belong to the runtime.
type Config struct {
	Node  string     `yaml:"-"` // this node's name; lease owner in the store
	Clock impl.Clock `yaml:"-"` // the only source of time
	Rand  *rand.Rand `yaml:"-"` // the only source of randomness (jitter); per node, seeded

	// Retries (seed 001): attempt n (1-based) that fails is retried after
	// min(InitialBackoff * Multiplier^(n-1), MaxBackoff) plus up to
	// JitterFraction of that, drawn from Rand; after MaxAttempts failures
	// the message is dead-lettered.
	MaxAttempts    int           `yaml:"max_attempts"`
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	Multiplier     float64       `yaml:"multiplier"`
	MaxBackoff     time.Duration `yaml:"max_backoff"`
	JitterFraction float64       `yaml:"jitter"`

	// Circuit breaker per bot (seed 001): open after BreakerFailures
	// consecutive failures, half-open after BreakerOpenFor, closed again
	// after BreakerCloseAfter successes in half-open. Open defers, never drops.
	BreakerFailures   int           `yaml:"breaker_failures"`
	BreakerOpenFor    time.Duration `yaml:"breaker_open_for"`
	BreakerCloseAfter int           `yaml:"breaker_close_after"`

	// Retention (seed 003).
	RetentionTTL    time.Duration `yaml:"retention_ttl"`    // 7 days
	RetentionMax    int           `yaml:"retention_max"`    // 1000 per bot
	CleanupInterval time.Duration `yaml:"cleanup_interval"` // 5 minutes
	// ClockSkewBudget is the largest clock difference between the node that
	// enqueued a message and the node that cleans it up. The TTL rule waits
	// this much longer, so a cleaner whose clock runs ahead never deletes a
	// message younger than RetentionTTL.
	ClockSkewBudget time.Duration `yaml:"clock_skew_budget"`

	WebhookTimeout    time.Duration `yaml:"webhook_timeout"`       // per-request timeout carried on each Send
	Lease             time.Duration `yaml:"lease"`                 // queue lease; must exceed WebhookTimeout
	MaxInFlightPerBot int           `yaml:"max_in_flight_per_bot"` // sends outstanding per bot
	TimestampLookback time.Duration `yaml:"timestamp_lookback"`    // replay window behind a timestamp cursor (covers producer skew)
	StoreRetry        time.Duration `yaml:"store_retry"`           // wait before retrying after a store error

	CursorMode CursorMode `yaml:"cursor_mode"`
	HandOff    HandOff    `yaml:"handoff"`
	// AckDelay, when positive, lets the queued hand-off (with CursorSync)
	// put one batch's acks and cursor write into the store call that
	// inserts the next batch, if the store is an impl.HandOffWriter: one
	// Postgres commit per batch instead of three. Acks and cursor writes
	// then wait until the next leased enqueue, or AckDelay at most (a
	// timer). A crash in that window loses them: the messages stay leased
	// and are sent again once their lease lapses, and the cursor is older,
	// so the upstream replays more. Both are duplicates, never a loss.
	// Zero (the default) writes each at once, as before.
	AckDelay time.Duration `yaml:"ack_delay"`
	Bugs     Bugs          `yaml:"-"`

	// CrashHook, if set, is asked at every crash point; returning true makes
	// Step return ErrCrashed right there.
	CrashHook func(CrashPoint) bool `yaml:"-"`
}

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
	field := ""
	bad := func(format string, args ...any) {
		if first == nil {
			first = &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
		}
	}
	on := func(name string) { field = name }
	atLeastOne := func(name string, n int) {
		on(name)
		if n < 1 {
			bad("%s is %d; it must be at least 1", name, n)
		}
	}
	positive := func(name string, d time.Duration) {
		on(name)
		if d <= 0 {
			bad("%s is %v; it must be positive", name, d)
		}
	}
	on("Node")
	if c.Node == "" {
		bad("Node is empty; set it to this node's name (it is the lease owner in the store)")
	}
	on("Clock")
	if c.Clock == nil {
		bad("Clock is nil; inject the runtime's clock (the engine never reads time itself)")
	}
	on("Rand")
	if c.Rand == nil && c.JitterFraction > 0 {
		bad("Rand is nil but JitterFraction is %v; inject a seeded *rand.Rand or set JitterFraction to 0", c.JitterFraction)
	}
	atLeastOne("MaxAttempts", c.MaxAttempts)
	positive("InitialBackoff", c.InitialBackoff)
	on("Multiplier")
	if c.Multiplier < 1 || math.IsNaN(c.Multiplier) || math.IsInf(c.Multiplier, 0) {
		bad("Multiplier is %v; it must be a finite number >= 1", c.Multiplier)
	}
	on("MaxBackoff")
	if c.MaxBackoff < c.InitialBackoff {
		bad("MaxBackoff (%v) is below InitialBackoff (%v); raise MaxBackoff", c.MaxBackoff, c.InitialBackoff)
	}
	on("JitterFraction")
	if c.JitterFraction < 0 || c.JitterFraction > 1 || math.IsNaN(c.JitterFraction) {
		bad("JitterFraction is %v; it must be between 0 and 1", c.JitterFraction)
	}
	atLeastOne("BreakerFailures", c.BreakerFailures)
	positive("BreakerOpenFor", c.BreakerOpenFor)
	atLeastOne("BreakerCloseAfter", c.BreakerCloseAfter)
	on("ClockSkewBudget")
	if c.ClockSkewBudget < 0 {
		bad("ClockSkewBudget is %v; it must not be negative", c.ClockSkewBudget)
	}
	positive("RetentionTTL", c.RetentionTTL)
	atLeastOne("RetentionMax", c.RetentionMax)
	positive("CleanupInterval", c.CleanupInterval)
	positive("WebhookTimeout", c.WebhookTimeout)
	on("Lease")
	if c.Lease <= c.WebhookTimeout {
		bad("Lease (%v) must exceed WebhookTimeout (%v), or a slow request's message is claimed twice", c.Lease, c.WebhookTimeout)
	}
	atLeastOne("MaxInFlightPerBot", c.MaxInFlightPerBot)
	on("TimestampLookback")
	if c.TimestampLookback < 0 {
		bad("TimestampLookback is %v; it must not be negative", c.TimestampLookback)
	}
	positive("StoreRetry", c.StoreRetry)
	on("CursorMode")
	if c.CursorMode != CursorSync && c.CursorMode != CursorAsync {
		bad("CursorMode is %d; use CursorSync or CursorAsync", c.CursorMode)
	}
	on("AckDelay")
	if c.AckDelay < 0 || c.AckDelay >= c.Lease-c.WebhookTimeout {
		bad("AckDelay is %v; it must be at least 0 and below Lease - WebhookTimeout (%v), or a delivered message's lease can lapse before its ack", c.AckDelay, c.Lease-c.WebhookTimeout)
	}
	on("HandOff")
	if c.HandOff != HandOffQueued && c.HandOff != HandOffDirect {
		bad("HandOff is %d; use HandOffQueued or HandOffDirect", c.HandOff)
	}
	return first
}

// ConfigError is what Validate reports: the field (the Go name, so a
// decoder can point at the key it came from) and what is wrong with it.
type ConfigError struct {
	Field string
	Msg   string
}

func (e *ConfigError) Error() string { return "engine config: " + e.Msg }

var cursorModes = []string{CursorSync: "sync", CursorAsync: "async"}
var handOffs = []string{HandOffQueued: "queued", HandOffDirect: "direct"}

func (m CursorMode) MarshalText() ([]byte, error) { return textOf("cursor mode", cursorModes, int(m)) }
func (h HandOff) MarshalText() ([]byte, error)    { return textOf("hand-off", handOffs, int(h)) }

func (m *CursorMode) UnmarshalText(b []byte) error {
	i, err := parseText("cursor mode", cursorModes, string(b))
	*m = CursorMode(i)
	return err
}

func (h *HandOff) UnmarshalText(b []byte) error {
	i, err := parseText("hand-off mode", handOffs, string(b))
	*h = HandOff(i)
	return err
}

func textOf(what string, names []string, i int) ([]byte, error) {
	if i < 0 || i >= len(names) {
		return nil, fmt.Errorf("%d is not a %s", i, what)
	}
	return []byte(names[i]), nil
}

func parseText(what string, names []string, s string) (int, error) {
	for i, n := range names {
		if n == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not a %s; use %s", s, what, strings.Join(names, " or "))
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

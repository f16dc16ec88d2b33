package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl/memstore"
)

func TestDefaultConfigHasSeedNumbers(t *testing.T) {
	c := DefaultConfig()
	assert.Equal(t, 3, c.MaxAttempts)
	assert.Equal(t, time.Second, c.InitialBackoff)
	assert.Equal(t, 2.0, c.Multiplier)
	assert.Equal(t, 30*time.Second, c.MaxBackoff)
	assert.Equal(t, 0.3, c.JitterFraction)
	assert.Equal(t, 5, c.BreakerFailures)
	assert.Equal(t, 60*time.Second, c.BreakerOpenFor)
	assert.Equal(t, 3, c.BreakerCloseAfter)
	assert.Equal(t, 7*24*time.Hour, c.RetentionTTL)
	assert.Equal(t, 1000, c.RetentionMax)
	assert.Equal(t, 5*time.Minute, c.CleanupInterval)
	assert.Equal(t, 2*time.Second, c.WebhookTimeout)
	assert.Equal(t, 30*time.Second, c.Lease)
	assert.Equal(t, 8, c.MaxInFlightPerBot)
	assert.Equal(t, 10*time.Minute, c.TimestampLookback)
	assert.Equal(t, time.Second, c.StoreRetry)
	assert.Equal(t, CursorSync, c.CursorMode)
	assert.Equal(t, Bugs{}, c.Bugs)
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := DefaultConfig()
	good.Clock = &fakeClock{t: t0}
	good.Rand = rand.New(rand.NewPCG(1, 1))
	_, err := New(good, memstore.New())
	require.NoError(t, err)

	_, err = New(good, nil)
	require.ErrorIs(t, err, ErrNilStore)

	cases := map[string]func(*Config){
		"Clock":             func(c *Config) { c.Clock = nil },
		"Rand":              func(c *Config) { c.Rand = nil },
		"Node":              func(c *Config) { c.Node = "" },
		"MaxAttempts":       func(c *Config) { c.MaxAttempts = 0 },
		"Multiplier":        func(c *Config) { c.Multiplier = 0.5 },
		"MaxBackoff":        func(c *Config) { c.MaxBackoff = time.Millisecond },
		"JitterFraction":    func(c *Config) { c.JitterFraction = 1.5 },
		"Lease":             func(c *Config) { c.Lease = c.WebhookTimeout },
		"MaxInFlightPerBot": func(c *Config) { c.MaxInFlightPerBot = 0 },
		"RetentionMax":      func(c *Config) { c.RetentionMax = 0 },
		"CleanupInterval":   func(c *Config) { c.CleanupInterval = 0 },
		"StoreRetry":        func(c *Config) { c.StoreRetry = 0 },
		"CursorMode":        func(c *Config) { c.CursorMode = 7 },
		"BreakerFailures":   func(c *Config) { c.BreakerFailures = 0 },
	}
	for field, mutate := range cases {
		c := good
		mutate(&c)
		_, err := New(c, memstore.New())
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field, "the error must name the field to fix")
	}

	// Without jitter no randomness is needed.
	c := good
	c.Rand, c.JitterFraction = nil, 0
	_, err = New(c, memstore.New())
	require.NoError(t, err)
}

func TestBackoffScheduleBounds(t *testing.T) {
	c := DefaultConfig()
	bases := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	almostOne := math.Nextafter(1, 0)
	for i, base := range bases {
		n := i + 1
		assert.Equal(t, base, Backoff(c, n, 0), "attempt %d without jitter", n)
		hi := Backoff(c, n, almostOne)
		assert.Less(t, hi, base+base*3/10, "attempt %d: jitter adds strictly less than 30%%", n)
		assert.Greater(t, hi, base+base*29/100, "attempt %d: jitter reaches almost 30%%", n)
	}
	assert.Equal(t, Backoff(c, 1, 0), Backoff(c, 0, 0), "attempt numbers below 1 count as the first")
	assert.Equal(t, 30*time.Second, Backoff(c, 5000, 0), "huge attempt numbers saturate at MaxBackoff")
}

func TestStepBeforeStartIsAnError(t *testing.T) {
	r := newRig(t, nil)
	eng, err := New(r.cfg, r.st)
	require.NoError(t, err)
	err = eng.Step(KeyPublished{Bot: "b"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Start")
}

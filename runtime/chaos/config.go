// The run's configuration: what the caller asks for and what it is checked against.

package chaos

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// Config is one chaos run.
type Config struct {
	Seed     uint64
	Duration time.Duration // the fault phase (production runs during it)
	Kills    int           // SIGKILLs in the fault phase
	DBCuts   int           // database cuts and stalls
	// BotFaults are windows of 5xx, refused connections, timeouts after
	// the handler ran, slow answers or duplicated requests (on every bot
	// but bot-0); -1 = one per 4s of the fault phase.
	BotFaults int
	// Outage, when positive, adds one long database outage to the plan (Plan):
	// every connection stalls for this long from a third of the way into
	// the fault phase (store calls fail by their timeout meanwhile).
	Outage time.Duration
	Bots   int           // webhook servers (at least 2)
	Rate   int           // events produced per second, over all streams
	Settle time.Duration // longest wait for quiescence after the heal
	// KillWindow: an answer that reached the engine less than this long
	// before a SIGKILL belongs to no attempt the engine completed
	// (PROTOCOL.md, "Kills"). Zero means DefaultKillWindow.
	KillWindow time.Duration
	// Faults, when not empty, limits the plan to these kinds (the plan is
	// drawn as usual, then filtered, so a seed's faults of the kinds kept
	// stay where they were).
	Faults []faults.Kind
	// Schedule, when set, is the plan (a replay): Plan is not drawn.
	Schedule []faults.Fault
	// Args is the command line that gives this run's plan and workload
	// (the report carries it; chaos --replay parses it again).
	Args []string

	// DSN is the real Postgres; the engine reaches it through the proxy,
	// in a schema of its own that the run drops at the end.
	DSN string
	// EngineCmd starts the engine; the harness appends --upstream,
	// --registry, --listen, --dsn, --schema and --node, and adds
	// DELIVERYSIM_STATE_DIR to EngineEnv.
	EngineCmd []string
	EngineEnv []string
	// Breaker: the engine declares a per-bot circuit breaker (its
	// Engine.Breaker* settings); breaker-policy is judged only then. The
	// reference engine has one.
	Breaker bool
	// Snapshots: the engine declares snapshot sources (PROTOCOL.md,
	// "Snapshot sources"); the workload serves repositories and the
	// snapshot checks are judged only then. The reference engine does.
	Snapshots bool
	// Retention: the engine declares seed 003's retention of held messages
	// (PROTOCOL.md, "Rules judged with the declared settings":
	// retention-bounds) with Engine.RetentionTTL, RetentionMax and
	// CleanupInterval; a message it may drop is then no loss (mayDrop). The
	// reference engine does (serve --retention-scope held).
	Retention bool
	// Reference says EngineCmd is deliverysim serve: its /metrics must
	// show deliveries (for another engine, metrics are judged only if it
	// serves them).
	Reference bool

	// Engine is the engine's configuration as the checker must assume it:
	// its retry limit and backoff, lease, timeouts and store retry are the
	// checker's bounds (bounds.Of), and the bots' timeout fault outlasts its
	// webhook timeout. For the reference engine it is exactly what serve
	// runs with (the command line is rendered from it); an engine under
	// certification declares its own. Zero means ReferenceEngine().
	Engine engine.Config

	Progress io.Writer // human progress lines (nil = none)
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Bots <= 0 {
		c.Bots = 4
	}
	if c.BotFaults < 0 {
		c.BotFaults = int(c.Duration / (4 * time.Second))
	}
	if c.Rate <= 0 {
		c.Rate = 20
	}
	if c.Settle <= 0 {
		c.Settle = 60 * time.Second
	}
	if c.KillWindow <= 0 {
		c.KillWindow = DefaultKillWindow
	}
	if c.Engine.MaxAttempts == 0 {
		c.Engine = ReferenceEngine()
	}
}

// DefaultKillWindow is PROTOCOL.md's kill window: how long before a SIGKILL
// an answer may reach the engine and still belong to no attempt it
// completed (the time to make its outcome durable).
const DefaultKillWindow = 500 * time.Millisecond

// ReferenceEngine is the reference engine's configuration under chaos:
// engine.DefaultConfig with short timeouts and backoffs, so that a run of a
// minute retries, opens breakers and recovers many times.
func ReferenceEngine() engine.Config {
	c := engine.DefaultConfig()
	c.WebhookTimeout, c.Lease = 500*time.Millisecond, 3*time.Second
	c.InitialBackoff, c.MaxBackoff, c.MaxAttempts = 100*time.Millisecond, time.Second, 8
	c.BreakerOpenFor, c.CleanupInterval, c.StoreRetry = time.Second, 2*time.Second, 200*time.Millisecond
	// Producers' clocks are at most 0.5s off here; the default 10m
	// lookback would replay the whole timestamp stream on every restart.
	c.TimestampLookback = 5 * time.Second
	// Retention (seed 003) of the messages held for a bot without a key
	// (serve --retention-scope held): the last bot's backlog of about 13
	// messages a second passes both limits at every cleanup (seven before
	// its key at 15 s). A cap of 24 is under the 26 messages that arrive
	// between two cleanups, so every cleanup trims (a cap that trims the
	// wrong end shows each time); a TTL of 3.5 s is under the 3.8 s the
	// oldest of the 24 kept at one cleanup has reached at the next, so
	// every cleanup ages some out too, and well over the cleanup interval,
	// so a TTL served much shorter drops, at the last cleanup before the
	// key, messages the wire shows were younger than it. The clock-skew
	// budget is for clocks of several nodes; here there is one.
	c.RetentionTTL, c.RetentionMax, c.ClockSkewBudget = 3500*time.Millisecond, 24, 0
	return c
}

// NoRetention makes c's retention settings bind nothing in a chaos run:
// what an engine that declares no retention (chaos --retention none) is
// declared with, and what the reference then serves.
func NoRetention(c *engine.Config) {
	c.RetentionTTL, c.RetentionMax = 7*24*time.Hour, 1_000_000
}

// Validate reports the first thing wrong with c.
func (c *Config) Validate() error {
	switch {
	case c.Duration < time.Second || c.Duration > 24*time.Hour:
		return fmt.Errorf("--duration %s: use between 1s and 24h", c.Duration)
	case c.Kills < 0 || c.Kills > 10000:
		return fmt.Errorf("--kills %d: use 0 to 10000", c.Kills)
	case c.Kills > 0 && c.Duration/time.Duration(c.Kills) < 500*time.Millisecond:
		return fmt.Errorf("--kills %d in %s leaves under 0.5s between kills; lengthen --duration or lower --kills", c.Kills, c.Duration)
	case c.DBCuts < 0 || c.DBCuts > 10000:
		return fmt.Errorf("--db-cuts %d: use 0 to 10000", c.DBCuts)
	case c.BotFaults > 10000:
		return fmt.Errorf("--bot-faults %d: use 0 to 10000", c.BotFaults)
	case c.Bots < 2 || c.Bots > 64:
		return fmt.Errorf("--bots %d: use 2 to 64", c.Bots)
	case c.Rate < 1 || c.Rate > 2000:
		return fmt.Errorf("--rate %d: use 1 to 2000 events per second", c.Rate)
	case c.Outage < 0 || c.Outage > c.Duration-c.Duration/3:
		return fmt.Errorf("--db-outage %s: use 0 (none) up to two thirds of --duration (%s); it starts a third of the way in", c.Outage, c.Duration-c.Duration/3)
	case c.Settle < time.Second || c.Settle > time.Hour:
		return fmt.Errorf("--settle %s: use between 1s and 1h", c.Settle)
	case c.KillWindow < 0 || c.KillWindow > 10*time.Second:
		return fmt.Errorf("--kill-window %s: use 0 (the default, %s) to 10s", c.KillWindow, DefaultKillWindow)
	case len(c.EngineCmd) == 0:
		return errors.New("no engine command")
	case c.DSN == "":
		return errors.New("no Postgres DSN")
	}
	return nil
}

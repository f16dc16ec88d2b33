// Package bench measures the reference engine's replay throughput after a
// restart, per backend, beside a baseline taken in the same run: for
// Postgres the raw COPY-in plus streaming read-out of the same rows on the
// same database, for memory the bare loop that only reads the events.
//
// Replay is what the CLI (`deliverysim bench replay`) calls; the Benchmark
// functions in this package's tests call it too, so both report the same
// measurement.
package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// Backends Replay knows.
const (
	BackendMemory   = "memory"
	BackendPostgres = "postgres"
)

// Hand-off modes Replay knows (engine.HandOff by name).
const (
	HandOffDirect = "direct"
	HandOffQueued = "queued"
)

// ReplayConfig is one replay measurement. Zero fields take the defaults
// noted on them.
type ReplayConfig struct {
	Backend string // BackendMemory (default) or BackendPostgres
	// HandOff is the engine's hand-off: HandOffDirect (default: a bot that
	// can take an event is sent it with no queue row and the cursor waits
	// for the answers) or HandOffQueued (every delivery is a queue row,
	// inserted leased and deleted after the 2xx).
	HandOff string
	Events  int // upstream events after the stored cursors, over all streams (default 100000)
	Streams int // streams, each with a stored cursor (default 4)
	Bots    int // bots, each a member of every stream with its key published (default 1)

	BatchSize    int // events per upstream batch (default 1000)
	PayloadBytes int // bytes per event payload (default 64)
	// MaxInFlight is the engine's MaxInFlightPerBot: how many webhook
	// requests a bot may have outstanding, which also caps each Claim and
	// each direct hand-off. Default: DefaultMaxInFlight, or BatchSize if
	// that is larger.
	MaxInFlight int
	// SingleResults feeds each webhook result as its own WebhookResult
	// input instead of one WebhookResults per batch of answers.
	SingleResults bool
	// AsyncCursors runs the engine in CursorAsync mode; the driver performs
	// each CursorWrite at once.
	AsyncCursors bool
	// SkipBaseline leaves the baseline out (Baseline* fields stay zero).
	SkipBaseline bool

	// Postgres only. DSN is required. Schema, if set, names an existing
	// empty schema to work in (tests get one from pgtest); otherwise a
	// unique schema is created and dropped afterwards.
	DSN    string
	Schema string
}

// DefaultMaxInFlight lets a bot have a whole upstream batch outstanding, so
// a replaying engine hands a batch off with one enqueue (leased and sent at
// once when the store is an impl.LeasingEnqueuer, else claimed with one
// claim), one cursor write and one acknowledgement, instead of a claim and
// an ack per few messages. The engine's own default (8) is a steady-state
// webhook concurrency; ReplayConfig.MaxInFlight = 8 measures that.
const DefaultMaxInFlight = 1024

// ReplayResult is one measurement. The JSON field names are the CLI's.
type ReplayResult struct {
	Backend string `json:"backend"`
	HandOff string `json:"handoff"`
	Events  int    `json:"events"`
	Streams int    `json:"streams"`
	Bots    int    `json:"bots"`

	BatchSize     int  `json:"batch_size"`
	PayloadBytes  int  `json:"payload_bytes"`
	MaxInFlight   int  `json:"max_in_flight"`
	SingleResults bool `json:"single_results"`
	AsyncCursors  bool `json:"async_cursors"`

	// Deliveries = Events * Bots: the (bot, event) pairs handed off.
	Deliveries int `json:"deliveries"`
	// Seconds runs from Start (the restart) to the last acknowledgement.
	Seconds         float64 `json:"seconds"`
	EventsPerSecond float64 `json:"events_per_second"`

	Baseline                string  `json:"baseline"`
	BaselineSeconds         float64 `json:"baseline_seconds"`
	BaselineEventsPerSecond float64 `json:"baseline_events_per_second"`
	// Ratio = EventsPerSecond / BaselineEventsPerSecond.
	Ratio float64 `json:"ratio"`

	// Postgres: the baseline's two halves, and the ratio to the COPY-in
	// half alone (the write cost the engine's bookkeeping is held to).
	CopyInSeconds         float64 `json:"copy_in_seconds,omitempty"`
	CopyInEventsPerSecond float64 `json:"copy_in_events_per_second,omitempty"`
	ReadOutSeconds        float64 `json:"read_out_seconds,omitempty"`
	RatioToCopyIn         float64 `json:"ratio_to_copy_in,omitempty"`

	StoreCalls StoreCalls `json:"store_calls"`
	Steps      int        `json:"engine_steps"` // inputs fed to the engine
}

// Summary is the result in one line for people: the rate, the baseline and
// the ratio.
func (r ReplayResult) Summary() string {
	s := fmt.Sprintf("%s replay (%s hand-off): %d events (%d streams, %d bots, %d deliveries) in %.3fs = %.0f events/s",
		r.Backend, r.HandOff, r.Events, r.Streams, r.Bots, r.Deliveries, r.Seconds, r.EventsPerSecond)
	if r.Baseline == "" {
		return s
	}
	s += fmt.Sprintf("; baseline %s %.0f events/s; ratio %.3f", r.Baseline, r.BaselineEventsPerSecond, r.Ratio)
	if r.RatioToCopyIn > 0 {
		s += fmt.Sprintf(" (%.3f of COPY-in alone, %.0f events/s)", r.RatioToCopyIn, r.CopyInEventsPerSecond)
	}
	return s
}

func (c *ReplayConfig) defaults() error {
	if c.Backend == "" {
		c.Backend = BackendMemory
	}
	if c.HandOff == "" {
		c.HandOff = HandOffDirect
	}
	setDefault(&c.Events, 100000)
	setDefault(&c.Streams, 4)
	setDefault(&c.Bots, 1)
	setDefault(&c.BatchSize, 1000)
	setDefault(&c.PayloadBytes, 64)
	setDefault(&c.MaxInFlight, max(DefaultMaxInFlight, c.BatchSize))
	switch {
	case c.Backend != BackendMemory && c.Backend != BackendPostgres:
		return fmt.Errorf("bench: unknown backend %q; use %q or %q", c.Backend, BackendMemory, BackendPostgres)
	case c.HandOff != HandOffDirect && c.HandOff != HandOffQueued:
		return fmt.Errorf("bench: unknown hand-off %q; use %q or %q", c.HandOff, HandOffDirect, HandOffQueued)
	case c.Events < 0 || c.Streams < 0 || c.Bots < 0 || c.BatchSize < 0 || c.PayloadBytes < 0 || c.MaxInFlight < 0:
		return errors.New("bench: events, streams, bots, batch size, payload bytes and max in-flight must not be negative")
	case c.Streams > c.Events:
		return fmt.Errorf("bench: %d streams for %d events leaves streams empty; use at most as many streams as events", c.Streams, c.Events)
	case c.Backend == BackendPostgres && c.DSN == "":
		return errors.New("bench: the postgres backend needs a DSN; pass --dsn or set DELIVERYSIM_PG_DSN (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	return nil
}

func setDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// Replay measures one replay after a restart: cursors are stored for every
// stream, the engine boots (Start), subscribes from them, and is fed every
// event after them while bots answer each request with a 2xx at once. The
// clock runs from Start to the last acknowledgement and so covers all of
// the engine's durable bookkeeping: enqueue, cursor writes, claims, acks.
// The data is generated, and the store opened and seeded, before it starts.
// The result is checked (every pair sent and acknowledged once, the queue
// empty, every cursor at its stream's end) before it is returned.
func Replay(ctx context.Context, cfg ReplayConfig) (ReplayResult, error) {
	if err := cfg.defaults(); err != nil {
		return ReplayResult{}, err
	}
	res := ReplayResult{
		Backend: cfg.Backend, HandOff: cfg.HandOff, Events: cfg.Events, Streams: cfg.Streams, Bots: cfg.Bots,
		BatchSize: cfg.BatchSize, PayloadBytes: cfg.PayloadBytes, MaxInFlight: cfg.MaxInFlight,
		SingleResults: cfg.SingleResults, AsyncCursors: cfg.AsyncCursors,
		Deliveries: cfg.Events * cfg.Bots,
	}
	data := genData(cfg.Events, cfg.Streams, cfg.Bots, cfg.PayloadBytes, 1)
	switch cfg.Backend {
	case BackendPostgres:
		return res, replayPostgres(ctx, cfg, &data, &res)
	default:
		return res, replayMemory(ctx, cfg, &data, &res)
	}
}

func replayMemory(ctx context.Context, cfg ReplayConfig, data *dataset, res *ReplayResult) error {
	if !cfg.SkipBaseline {
		res.Baseline = "memory-read-loop"
		res.BaselineSeconds = readLoop(data, cfg.BatchSize)
	}
	store := memstore.New()
	defer store.Close()
	return measure(ctx, cfg, store, data, res)
}

// measure seeds the cursors, runs the timed replay on store and fills res.
func measure(ctx context.Context, cfg ReplayConfig, store impl.Store, data *dataset, res *ReplayResult) error {
	cursors := make([]impl.Cursor, len(data.streams))
	for i, st := range data.streams {
		cursors[i] = startCursor(st.id)
	}
	if _, err := store.AdvanceCursors(ctx, cursors); err != nil {
		return fmt.Errorf("bench: store the starting cursors: %w", err)
	}
	ecfg := engine.DefaultConfig()
	ecfg.Node = "bench"
	ecfg.MaxInFlightPerBot = cfg.MaxInFlight
	if cfg.AsyncCursors {
		ecfg.CursorMode = engine.CursorAsync
	}
	if cfg.HandOff == HandOffDirect {
		ecfg.HandOff = engine.HandOffDirect
	}
	cs, wrapped := wrapCounting(store)
	dr, err := newDriver(ctx, wrapped, data, ecfg, cfg.BatchSize, !cfg.SingleResults)
	if err != nil {
		return err
	}
	reg := data.registry()
	runtime.GC() // leave the generator's garbage out of the timed part
	start := time.Now()
	err = dr.run(reg)
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		return err
	}
	res.StoreCalls, res.Steps = cs.n, dr.steps
	if err := dr.verify(); err != nil {
		return err
	}
	res.EventsPerSecond = rate(data.total, res.Seconds)
	if res.BaselineSeconds > 0 {
		res.BaselineEventsPerSecond = rate(data.total, res.BaselineSeconds)
		res.Ratio = res.EventsPerSecond / res.BaselineEventsPerSecond
	}
	if res.CopyInSeconds > 0 {
		res.CopyInEventsPerSecond = rate(data.total, res.CopyInSeconds)
		res.RatioToCopyIn = res.EventsPerSecond / res.CopyInEventsPerSecond
	}
	return nil
}

func rate(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// readLoop is the memory baseline: hand out every event in upstream
// batches exactly as the replay driver does, and read what a hand-off
// reads of each (id, position, payload) once per owed bot. It returns the
// seconds taken.
func readLoop(data *dataset, batch int) float64 {
	runtime.GC()
	start := time.Now()
	var acc int64
	var evs []engine.Event
	for s := range data.streams {
		st := &data.streams[s]
		for from := 0; from < st.n; from += batch {
			evs = st.fill(evs, from, min(from+batch, st.n))
			for i := range evs {
				ev := &evs[i]
				for range data.bots {
					acc += int64(len(ev.ID)) + int64(len(ev.Payload)) + ev.Pos.Minor
					if len(ev.Payload) > 0 {
						acc += int64(ev.Payload[0])
					}
				}
			}
		}
	}
	secs := time.Since(start).Seconds()
	runtime.KeepAlive(acc) // keeps the read loop from being optimised away
	return secs
}

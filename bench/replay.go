// Package bench measures the reference engine's replay throughput after a
// restart, per backend, beside a baseline taken in the same run: for
// Postgres the raw COPY-in plus streaming read-out of the same rows on the
// same database (and beside it the same rows COPYed a batch per commit),
// for memory the signing floor: the loop that only reads
// each event and computes its webhook signature for each bot.
//
// Replay is what the CLI (`deliverysim bench replay`) calls; the Benchmark
// functions in this package's tests call it too, so both report the same
// measurement.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/webhook"
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
	// SeparateWrites keeps the engine's AckDelay at 0: each batch's acks
	// and cursor write are store calls of their own. By default the
	// replay runs with DefaultAckDelay, so that on a store with
	// impl.HandOffWriter (both backends) the acks of one batch, the leased
	// insert of the next and the cursor go in one call (one Postgres
	// transaction). It matters only for the queued hand-off with sync
	// cursors; the direct hand-off writes no acks.
	SeparateWrites bool
	// SkipBaseline leaves the baseline out (Baseline* fields stay zero).
	SkipBaseline bool
	// CPUProfile, if set, receives a pprof CPU profile of the timed replay
	// alone (not the data generation or the baselines), so that a profile
	// shows the engine and store and nothing the ratio does not count.
	CPUProfile io.Writer

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

// DefaultAckDelay is the engine's AckDelay in a replay (unless
// SeparateWrites): a bound on how long an ack or cursor write waits for
// the next batch's insert. The replay's bots answer at once, so the next
// batch always comes first and the bound only ends the last batch.
const DefaultAckDelay = 100 * time.Millisecond

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
	// AckDelayMs is the engine's AckDelay: 0 when acks and cursor writes
	// are store calls of their own.
	AckDelayMs float64 `json:"ack_delay_ms"`

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
	// The same rows COPYed one upstream batch (BatchSize events) per
	// transaction, in the replay's order: the fewest commits a queue that
	// makes each batch durable before sending it can do, with no delete, no
	// engine and no read. RatioToBatchedCopyIn holds the engine to that
	// ceiling of its design; RatioToCopyIn to one bulk COPY, which no
	// batch-at-a-time writer reaches.
	BatchedCopyInSeconds         float64 `json:"batched_copy_in_seconds,omitempty"`
	BatchedCopyInEventsPerSecond float64 `json:"batched_copy_in_events_per_second,omitempty"`
	RatioToBatchedCopyIn         float64 `json:"ratio_to_batched_copy_in,omitempty"`

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
		s += fmt.Sprintf(" (%.3f of COPY-in alone, %.0f events/s", r.RatioToCopyIn, r.CopyInEventsPerSecond)
		if r.RatioToBatchedCopyIn > 0 {
			s += fmt.Sprintf("; %.3f of COPY-in a batch of %d per commit, %.0f events/s", r.RatioToBatchedCopyIn, r.BatchSize, r.BatchedCopyInEventsPerSecond)
		}
		s += ")"
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
	data := genData(ctx, cfg.Events, cfg.Streams, cfg.Bots, cfg.PayloadBytes, 1)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	switch cfg.Backend {
	case BackendPostgres:
		return res, replayPostgres(ctx, cfg, &data, &res)
	default:
		return res, replayMemory(ctx, cfg, &data, &res)
	}
}

func replayMemory(ctx context.Context, cfg ReplayConfig, data *dataset, res *ReplayResult) error {
	if !cfg.SkipBaseline {
		res.Baseline = "memory-signing-floor"
		res.BaselineSeconds = signingFloor(ctx, data, cfg.BatchSize)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	store := memstore.New()
	defer store.Close()
	if err := measure(ctx, cfg, store, data, res); err != nil || cfg.SkipBaseline {
		return err
	}
	// Whatever runs first in a fresh process pays for growing the heap
	// (page faults on memory the later run gets back from the first), so
	// the floor runs again after the replay and the faster of its two runs
	// is the baseline: the order can only count against the engine.
	again := signingFloor(ctx, data, cfg.BatchSize)
	if err := ctx.Err(); err != nil {
		return err
	}
	if again < res.BaselineSeconds {
		res.BaselineSeconds = again
		res.setRatios(data.total)
	}
	return nil
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
	if !cfg.SeparateWrites {
		ecfg.AckDelay = DefaultAckDelay
	}
	res.AckDelayMs = float64(ecfg.AckDelay) / float64(time.Millisecond)
	cs, wrapped := wrapCounting(store)
	dr, err := newDriver(ctx, wrapped, data, ecfg, cfg.BatchSize, !cfg.SingleResults)
	if err != nil {
		return err
	}
	reg := data.registry()
	runtime.GC() // leave the generator's garbage out of the timed part
	if cfg.CPUProfile != nil {
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return fmt.Errorf("bench: start the CPU profile: %w", err)
		}
	}
	start := time.Now()
	err = dr.run(reg)
	res.Seconds = time.Since(start).Seconds()
	if cfg.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	res.StoreCalls, res.Steps = cs.n, dr.steps
	if err := dr.verify(); err != nil {
		return err
	}
	res.setRatios(data.total)
	return nil
}

// setRatios fills the rates and ratios from the seconds measured.
func (res *ReplayResult) setRatios(total int) {
	res.EventsPerSecond = rate(total, res.Seconds)
	if res.BaselineSeconds > 0 {
		res.BaselineEventsPerSecond = rate(total, res.BaselineSeconds)
		res.Ratio = res.EventsPerSecond / res.BaselineEventsPerSecond
	}
	if res.CopyInSeconds > 0 {
		res.CopyInEventsPerSecond = rate(total, res.CopyInSeconds)
		res.RatioToCopyIn = res.EventsPerSecond / res.CopyInEventsPerSecond
	}
	if res.BatchedCopyInSeconds > 0 {
		res.BatchedCopyInEventsPerSecond = rate(total, res.BatchedCopyInSeconds)
		res.RatioToBatchedCopyIn = res.EventsPerSecond / res.BatchedCopyInEventsPerSecond
	}
}

func rate(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// signingFloor is the memory baseline: the work no delivery engine can
// skip. It hands out every event in upstream batches exactly as the replay
// driver does and, for each owed bot, computes the event's Standard
// Webhooks signature ("v1," + base64 HMAC-SHA256 of "id.timestamp.body")
// with the bot's secret, keyed once per bot as the engine keys it, and
// makes it the string a request carries (net/http headers are strings, so
// every sender in Go holds one per request), cut from shared blocks, the
// cheapest way to make many. Nothing is stored, queued or answered. It
// returns the seconds taken.
// A cancelled ctx stops it between batches (the result is then unused).
func signingFloor(ctx context.Context, data *dataset, batch int) float64 {
	signers := make([]floorSigner, len(data.bots))
	for b, bot := range data.bots {
		signers[b] = newFloorSigner(bot.Secret)
	}
	// Any fixed instant: the engine signs with its clock's Unix seconds,
	// which has the same width for the whole run.
	ts := dataEpoch.Add(24 * time.Hour).Unix()
	var block strings.Builder
	runtime.GC()
	start := time.Now()
	var acc byte
	var evs []engine.Event
	for s := range data.streams {
		st := &data.streams[s]
		for from := 0; from < st.n && ctx.Err() == nil; from += batch {
			evs = st.fill(evs, from, min(from+batch, st.n))
			for i := range evs {
				ev := &evs[i]
				for b := range signers {
					sig := signers[b].sign(ev.ID, ts, ev.Payload)
					if block.Cap()-block.Len() < len(sig) {
						block = strings.Builder{}
						block.Grow(64 * len(sig))
					}
					at := block.Len()
					block.Write(sig)
					header := block.String()[at:]
					acc ^= header[len(header)-2]
				}
			}
		}
	}
	secs := time.Since(start).Seconds()
	runtime.KeepAlive(acc) // keeps the signatures from being optimised away
	return secs
}

// floorSigner signs as the engine does (webhook.Signer: the bot's HMAC
// keyed once), into one reused buffer.
type floorSigner struct {
	s   *webhook.Signer
	out []byte
}

func newFloorSigner(secret []byte) floorSigner { return floorSigner{s: webhook.NewSigner(secret)} }

func (f *floorSigner) sign(id string, ts int64, body []byte) []byte {
	f.out = f.s.AppendSign(f.out[:0], id, ts, body)
	return f.out
}

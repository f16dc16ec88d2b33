// Package chaos is a real-process fault harness on loopback. It runs a
// real upstream (streams with sealing and replay) and registry
// (runtime/protoserver), N webhook servers verifying with impl/receiver,
// a TCP proxy between the engine and Postgres, and the engine under test
// as a child process. On a seeded schedule it SIGKILLs and restarts the
// engine, cuts or stalls its database connections and breaks bots; then
// it heals, waits (bounded) for quiescence and judges what it observed —
// productions, requests received by the bots and their answers, handler
// runs, the store's queue and cursors — with the simulator's checker
// (model/oracle).
//
// Real time is not deterministic: the seed fixes the workload's shape and
// the fault schedule, not the interleaving. A failing seed is a plan to
// rerun, not a replay.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/bounds"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
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

	// DSN is the real Postgres; the engine reaches it through the proxy,
	// in a schema of its own that the run drops at the end.
	DSN string
	// EngineCmd starts the engine; the harness appends --upstream,
	// --registry, --listen, --dsn, --schema and --node.
	EngineCmd []string
	EngineEnv []string
	// Reference says EngineCmd is deliverysim serve: its /metrics must
	// show deliveries and its store is read for dead letters.
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
	if c.Engine.MaxAttempts == 0 {
		c.Engine = ReferenceEngine()
	}
}

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
	// Retention is not judged under chaos (a drop looks like a loss on the
	// wire); a backlog behind many kills must not reach the cap.
	c.RetentionMax = 1_000_000
	return c
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
	case len(c.EngineCmd) == 0:
		return errors.New("no engine command")
	case c.DSN == "":
		return errors.New("no Postgres DSN")
	}
	return nil
}

// Report is the result of a run.
type Report struct {
	Seed       uint64             `json:"seed"`
	Duration   string             `json:"duration"`
	Engine     []string           `json:"engine_cmd"`
	Schedule   []faults.Fault     `json:"schedule"`
	Note       string             `json:"note"`
	Produced   int                `json:"produced"`
	Owed       int                `json:"obligations"`
	Delivered  int                `json:"delivered"`
	DeadLetter int                `json:"dead_lettered"`
	Lost       int                `json:"lost"`
	Duplicates Duplicates         `json:"duplicates"`
	Kills      int                `json:"kills"`
	DBCuts     int                `json:"db_cuts"`
	BotFaults  int                `json:"bot_faults"`
	Restarts   int                `json:"unexpected_exits"`
	LatencyMs  Latency            `json:"delivery_latency_ms"`
	Quiescent  bool               `json:"quiescent"`
	SettledIn  string             `json:"settled_in"`
	Metrics    MetricsSeen        `json:"metrics"`
	Invariants map[string]string  `json:"invariants"`
	Violations []oracle.Violation `json:"violations"`
	// Unjudged: what the checks this workload cannot judge reported (their
	// verdicts are "not judged"); they do not fail the run.
	Unjudged  []oracle.Violation `json:"unjudged_findings,omitempty"`
	Stats     oracle.CheckStats  `json:"stats"`
	EngineLog []string           `json:"engine_log_tail,omitempty"`
}

// Duplicates on the wire (requests from the engine beyond the first per
// bot and event), injected by the harness (a request replayed to the
// receiver), and at handlers (runs beyond the first: must stay 0 within
// the dedup window).
type Duplicates struct {
	Wire     int `json:"wire"`
	Handler  int `json:"handler"`
	Injected int `json:"injected"`
}

// Latency is produced-to-first-handler-run, per (bot, event).
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// MetricsSeen is what scraping the engine's /metrics during the run found
// (summed over incarnations: each process starts its counters at zero).
type MetricsSeen struct {
	Scrapes int     `json:"scrapes"`
	Acked   float64 `json:"acked_total"`
	Sent    float64 `json:"sent_total"`
	// StoreErrors: store calls that failed, as the engine counted them
	// (deliverysim_engine_store_errors_total), over every process.
	StoreErrors float64 `json:"store_errors_total"`
}

// Harness-level invariants beside the checker's.
const (
	InvSigned       = "signed-requests" // no request from the engine was rejected by a healthy receiver
	InvCleanStop    = "clean-shutdown"  // SIGTERM after the run: exit 0
	InvMetrics      = "metrics"         // the reference engine's /metrics showed deliveries
	InvNoCrash      = "no-unexpected-exit"
	notJudged       = "not judged"
	streamLog       = "log-1"
	streamTimestamp = "ts-1"
)

type harness struct {
	cfg   Config
	rec   *recorder
	up    *protoserver.Upstream
	reg   *protoserver.Registry
	bots  []*bot
	byID  map[string]*bot
	proxy *proxy
	eng   *engineProc

	schema, directDSN string
	listen            string
	start             time.Time

	mu      sync.Mutex
	scrapes MetricsSeen
	// The engine's counters as scraped: what the current process showed
	// last, and the totals of the processes before it (each restart starts
	// its counters at zero again).
	lastSeen, before [3]float64 // acked, sent, store errors
	store            *pgstore.Store
}

func (h *harness) progress(format string, args ...any) {
	if h.cfg.Progress != nil {
		fmt.Fprintf(h.cfg.Progress, "chaos: "+format+"\n", args...)
	}
}

// Run executes one chaos run. It returns an error only if the run could
// not happen (bad config, no database, interrupted); violations are in the
// report. Everything it started is stopped, and its schema and temp dir
// removed, whatever happens.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, byID: map[string]*bot{}}
	return h.run(ctx)
}

func (h *harness) run(ctx context.Context) (rep *Report, err error) {
	cfg := h.cfg
	botIDs := make([]string, cfg.Bots)
	for i := range botIDs {
		botIDs[i] = fmt.Sprintf("bot-%d", i)
	}
	plan := Plan(cfg, botIDs)
	h.progress("seed %d, fault phase %s, %d bots, %d events/s; schedule (%d faults):", cfg.Seed, cfg.Duration, cfg.Bots, cfg.Rate, len(plan))
	for _, f := range plan {
		if err := Executable(f); err != nil {
			return nil, fmt.Errorf("internal: the drawn schedule holds a fault this harness cannot carry out: %v", err)
		}
		h.progress("  %s", describe(f))
	}
	h.progress("real time is not deterministic: the seed fixes this plan and the workload, not the interleaving")

	// Postgres: a schema of our own, reached by the engine through the proxy.
	target, err := pgTarget(cfg.DSN)
	if err != nil {
		return nil, err
	}
	h.schema = fmt.Sprintf("chaos_%d_%d_%x", cfg.Seed%1_000_000, os.Getpid(), rand.Uint32())
	if err := createSchema(ctx, cfg.DSN, h.schema); err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if derr := pgstore.DropSchema(dctx, cfg.DSN, h.schema); derr != nil && err == nil {
			err = fmt.Errorf("dropping schema %s: %w", h.schema, derr)
		}
	}()
	h.directDSN = cfg.DSN
	if h.proxy, err = newProxy(target); err != nil {
		return nil, err
	}
	defer h.proxy.close()
	proxied, err := withHost(cfg.DSN, h.proxy.addr())
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "deliverysim-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	logf, err := os.Create(filepath.Join(dir, "engine.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()

	params := bounds.Of(cfg.Engine)
	params.DedupWindow, params.DedupMaxEntries = 24*time.Hour, 10000
	params.LivenessBound, params.HOLBound, params.HealthyBots = cfg.Settle, 30*time.Second, []string{botIDs[0]}
	h.rec = newRecorder(params)

	// The protocol servers and the bots.
	h.up, h.reg = protoserver.NewUpstream(), protoserver.NewRegistry()
	h.up.Registry = h.reg
	h.up.OnServe = func(_ string, evs []protocol.Event) {
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		h.rec.arrived(ids)
	}
	upURL, stopUp, err := serveHTTP(h.up)
	if err != nil {
		return nil, err
	}
	defer stopUp()
	regURL, stopReg, err := serveHTTP(h.reg)
	if err != nil {
		return nil, err
	}
	defer stopReg()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xb075))
	for _, id := range botIDs {
		secret := make([]byte, 24)
		for i := range secret {
			secret[i] = byte(rng.Uint32())
		}
		b, err := newBot(id, secret, h.rec, cfg.Engine.WebhookTimeout, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		defer b.close()
		h.bots = append(h.bots, b)
		h.byID[id] = b
	}
	h.setupWorld()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h.listen = ln.Addr().String()
	_ = ln.Close()

	argv := append(append([]string(nil), cfg.EngineCmd...),
		"--upstream", upURL, "--registry", regURL, "--listen", h.listen, "--dsn", proxied, "--schema", h.schema)
	h.eng = &engineProc{argv: argv, env: cfg.EngineEnv, log: logf}
	defer h.eng.kill()

	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopBG()
		wg.Wait()
		if h.store != nil {
			h.store.Close()
		}
	}()

	h.start = time.Now()
	if err := h.eng.start(); err != nil {
		return nil, err
	}
	h.rec.obs(oracle.Observation{Kind: oracle.ObsNodeUp})
	wg.Add(2)
	go func() { defer wg.Done(); h.scrape(bg) }()
	go func() { defer wg.Done(); h.observeStore(bg) }()
	// The producer is waited for before the heal: canceling its context
	// does not stop a tick it has already taken (a select with both ready
	// picks either), and an event produced after the heal, and after the
	// quiescence wait saw nothing open, is an obligation the engine is
	// terminated before it can meet (seen: the fault phase's last tick,
	// produced 3 steps before the end, judged lost).
	prodCtx, cancelProd := context.WithCancel(bg)
	prodDone := make(chan struct{})
	go func() { defer close(prodDone); h.produce(prodCtx) }()
	stopProd := func() { cancelProd(); <-prodDone }
	defer stopProd() // on the error paths; a second call returns at once

	counts, restarts, err := h.faultPhase(ctx, plan)
	stopProd()
	if err != nil {
		return nil, err
	}

	// Heal: every fault ends, the engine is up, production has stopped.
	for _, b := range h.bots {
		b.setMode(modeHealthy)
	}
	if !h.eng.running() {
		if err := h.restart(); err != nil {
			return nil, err
		}
	}
	h.rec.obs(oracle.Observation{Kind: oracle.ObsHeal})
	_, open := h.rec.outstanding()
	h.progress("healed at %s; %d obligations open; waiting up to %s for quiescence", time.Since(h.start).Round(time.Millisecond), open, cfg.Settle)
	quiet, settled, r2, err := h.settle(ctx)
	restarts += r2
	if err != nil {
		return nil, err
	}

	exitErr, killed := h.eng.term(15 * time.Second)
	stopBG()
	wg.Wait()
	final := h.finalStore()
	h.rec.obs(oracle.Observation{Kind: oracle.ObsEnd})
	result := h.rec.chk.Finish(final)

	rep = h.report(plan, counts, restarts, quiet, settled, result, exitErr, killed)
	if len(rep.Violations) > 0 {
		rep.EngineLog = tail(filepath.Join(dir, "engine.log"), 40)
	}
	return rep, nil
}

type faultCounts struct{ kills, cuts, bot int }

// faultPhase carries out the plan while production runs; the engine is
// restarted whenever it exits on its own (counted as unexpected).
func (h *harness) faultPhase(ctx context.Context, plan []faults.Fault) (faultCounts, int, error) {
	var c faultCounts
	restarts := 0
	stop := make(chan struct{})
	defer close(stop)
	end := h.start.Add(h.cfg.Duration)
	next := 0
	lastReport := time.Now()
	for {
		now := time.Now()
		if now.After(end) {
			return c, restarts, nil
		}
		if ctx.Err() != nil {
			return c, restarts, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if !h.eng.running() {
			h.rec.harnessError("the engine exited on its own during the fault phase: %v", h.eng.err)
			restarts++
			h.rec.obs(oracle.Observation{Kind: oracle.ObsNodeDown})
			if err := h.restart(); err != nil {
				return c, restarts, err
			}
		}
		for next < len(plan) && !h.start.Add(plan[next].At).After(now) {
			a := plan[next]
			next++
			switch a.Kind {
			case faults.Crash:
				h.eng.kill()
				h.rec.obs(oracle.Observation{Kind: oracle.ObsNodeDown})
				c.kills++
				sleepCtx(ctx, a.RestartAfter)
				if err := h.restart(); err != nil {
					return c, restarts, err
				}
			case faults.StoreAmbiguous:
				h.proxy.cut()
				h.rec.obs(oracle.Observation{Kind: oracle.ObsStoreFault, Method: "connection-cut", Ambiguous: true})
				c.cuts++
			case faults.StoreError:
				// A stall fails calls by their timeout, which may come after
				// a commit: as ambiguous as a cut.
				h.rec.obs(oracle.Observation{Kind: oracle.ObsStoreFault, Method: "connection-stall", Ambiguous: true})
				go h.proxy.stall(a.Until-a.At, stop)
				c.cuts++
			default:
				b, m := h.byID[a.Bot], botModes[a.Kind]
				b.setMode(m)
				time.AfterFunc(a.Until-a.At, func() { b.clearMode(m) })
				c.bot++
			}
		}
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			owed, open := h.rec.outstanding()
			h.progress("%s: %d kills, %d db cuts, %d bot faults so far; %d obligations, %d open",
				time.Since(h.start).Round(time.Second), c.kills, c.cuts, c.bot, owed, open)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

func (h *harness) restart() error {
	if err := h.eng.start(); err != nil {
		return err
	}
	h.rec.obs(oracle.Observation{Kind: oracle.ObsNodeUp})
	return nil
}

// settle waits until every obligation is handled or dead-lettered, or
// Settle passes.
func (h *harness) settle(ctx context.Context) (bool, time.Duration, int, error) {
	start := time.Now()
	restarts := 0
	for {
		if ctx.Err() != nil {
			return false, 0, restarts, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if !h.eng.running() {
			h.rec.harnessError("the engine exited on its own after the heal: %v", h.eng.err)
			restarts++
			h.rec.obs(oracle.Observation{Kind: oracle.ObsNodeDown})
			if err := h.restart(); err != nil {
				return false, 0, restarts, err
			}
		}
		if _, open := h.rec.outstanding(); open == 0 {
			return true, time.Since(start), restarts, nil
		}
		if time.Since(start) > h.cfg.Settle {
			return false, time.Since(start), restarts, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// setupWorld registers the bots and the first memberships: every bot on
// the log stream, the first two on the timestamp stream. The last bot's
// key is published later; one bot joins the timestamp stream and one
// leaves the log stream during the run (produce does those).
func (h *harness) setupWorld() {
	h.up.AddStream(streamLog, engine.LogStream)
	h.up.AddStream(streamTimestamp, engine.TimestampStream)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for i, b := range h.bots {
		h.reg.AddBot(protocol.Bot{ID: b.id, Secret: b64(b.secret), URL: b.url(), HasKey: i != len(h.bots)-1})
	}
	for i, b := range h.bots {
		h.addMembershipLocked(streamLog, b.id, impl.Position{}, true)
		if i < 2 {
			h.addMembershipLocked(streamTimestamp, b.id, impl.Position{}, true)
		}
	}
}

func (h *harness) addMembershipLocked(stream, bot string, from impl.Position, member bool) {
	kind := protocol.KindLog
	if stream == streamTimestamp {
		kind = protocol.KindTimestamp
	}
	h.reg.AddMembership(protocol.Membership{Stream: stream, Kind: kind, Bot: bot, From: protocol.FromPos(from), Member: member})
	h.rec.membershipLocked(stream, stream == streamLog, bot, from, member)
}

// produce emits events at the configured rate until ctx ends, seals the
// log stream's minipool, and makes the registry changes.
func (h *harness) produce(ctx context.Context) {
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 0x9d0d))
	tick := time.NewTicker(time.Second / time.Duration(h.cfg.Rate))
	defer tick.Stop()
	seal := time.NewTicker(250 * time.Millisecond)
	defer seal.Stop()
	d := h.cfg.Duration
	// The key comes late, but not so late that the held messages reach
	// the engine's per-bot retention cap: the harness does not observe
	// retention drops (it cannot tell them from losses on the wire), so
	// the workload must not cause them.
	keyAt := h.start.Add(min(d/4, 15*time.Second))
	joinAt, leaveAt := h.start.Add(d*2/5), h.start.Add(d*3/5)
	var keyDone, joinDone, leaveDone bool
	var lastLog impl.Position
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-seal.C:
			h.up.Seal(streamLog)
			continue
		case <-tick.C:
		}
		if ctx.Err() != nil {
			return // the fault phase is over: no event after it
		}
		now := time.Now()
		h.rec.mu.Lock()
		if !keyDone && now.After(keyAt) {
			keyDone = true
			h.reg.PublishKey(h.bots[len(h.bots)-1].id)
		}
		if !joinDone && now.After(joinAt) && len(h.bots) > 2 {
			joinDone = true
			h.addMembershipLocked(streamTimestamp, h.bots[2].id, impl.Position{Major: now.UnixMilli()}, true)
		}
		if !leaveDone && now.After(leaveAt) {
			leaveDone = true
			h.addMembershipLocked(streamLog, h.bots[1].id, lastLog, false)
		}
		seq++
		stream, created := streamLog, now
		if rng.IntN(3) == 0 {
			// A producer with its own clock, up to half a second off.
			stream, created = streamTimestamp, now.Add(time.Duration(rng.Int64N(int64(time.Second)))-500*time.Millisecond)
		}
		id := fmt.Sprintf("ev-%d-%06d", h.cfg.Seed%1000, seq)
		payload := fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q,"r":%d}`, stream, seq, id, rng.Uint32())
		if pos, ok := h.up.Produce(stream, id, payload, created); ok {
			h.rec.producedLocked(stream, stream == streamLog, id, pos, payload)
			if stream == streamLog {
				lastLog = pos
			}
		}
		h.rec.mu.Unlock()
	}
}

// observeStore reads the engine's queue and cursors (directly, not
// through the proxy) a few times a second, for the cursor invariants and
// dead letters. Only a schema the reference store layout can open is read.
func (h *harness) observeStore(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.snapshotStore(ctx)
	}
}

func (h *harness) openStore(ctx context.Context) *pgstore.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := pgstore.Open(octx, h.directDSN, pgstore.Options{Schema: h.schema, MaxConns: 2, ApplicationName: "deliverysim-chaos-observer"})
		if err != nil {
			return nil
		}
		h.store = s
	}
	return h.store
}

func (h *harness) snapshotStore(ctx context.Context) (cs []impl.Cursor, ms []impl.Message, ok bool) {
	s := h.openStore(ctx)
	if s == nil {
		return nil, nil, false
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := s.ListCursors(c)
	if err != nil {
		return nil, nil, false
	}
	ms, err = s.ListMessages(c, "")
	if err != nil {
		return nil, nil, false
	}
	h.rec.storeSnapshot(cs, ms)
	return cs, ms, true
}

func (h *harness) finalStore() oracle.CheckFinal {
	cs, ms, ok := h.snapshotStore(context.Background())
	if !ok {
		return oracle.CheckFinal{}
	}
	return oracle.CheckFinal{Messages: ms, Cursors: cs}
}

// scrape reads the engine's /metrics every second.
func (h *harness) scrape(ctx context.Context) {
	c := &http.Client{Timeout: time.Second}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		resp, err := c.Get("http://" + h.listen + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		var now [3]float64
		var ok [3]bool
		for i, name := range []string{"deliverysim_engine_acked_total", "deliverysim_engine_sent_total", "deliverysim_engine_store_errors_total"} {
			now[i], ok[i] = metric(string(body), name)
		}
		if !ok[0] || !ok[1] {
			continue
		}
		h.mu.Lock()
		h.scrapes.Scrapes++
		for i := range now {
			if now[i] < h.lastSeen[i] {
				// A new process: its counters started again at zero.
				for j := range now {
					h.before[j] += h.lastSeen[j]
				}
				break
			}
		}
		h.lastSeen = now
		h.scrapes.Acked, h.scrapes.Sent, h.scrapes.StoreErrors = h.before[0]+now[0], h.before[1]+now[1], h.before[2]+now[2]
		h.mu.Unlock()
	}
}

func metric(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func (h *harness) report(plan []faults.Fault, c faultCounts, restarts int, quiet bool, settled time.Duration,
	res oracle.CheckReport, exitErr error, killed bool) *Report {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	h.mu.Lock()
	ms := h.scrapes
	h.mu.Unlock()
	rep := &Report{
		Seed: h.cfg.Seed, Duration: h.cfg.Duration.String(), Engine: h.cfg.EngineCmd, Schedule: plan,
		Note:     "real time is not deterministic: rerunning the seed repeats the plan and the workload, not the interleaving",
		Produced: len(r.order), Owed: res.Stats.Obligations, Delivered: res.Stats.Handled, DeadLetter: res.Stats.DeadLettered,
		Kills: c.kills, DBCuts: c.cuts, BotFaults: c.bot, Restarts: restarts,
		Quiescent: quiet, SettledIn: settled.Round(time.Millisecond).String(), Metrics: ms,
		Violations: res.Violations, Stats: res.Stats, Invariants: map[string]string{},
	}
	for k, n := range r.requests {
		if n > 1 {
			rep.Duplicates.Wire += n - 1
		}
		_ = k
	}
	for _, n := range r.handlerRuns {
		rep.Duplicates.Handler += n - 1
	}
	rep.Duplicates.Injected = r.dups
	rep.LatencyMs = latency(r.latencies)

	add := func(inv, format string, args ...any) {
		rep.Violations = append(rep.Violations, oracle.Violation{Invariant: inv, Time: time.Now(), Detail: fmt.Sprintf(format, args...)})
	}
	if r.rejections > 0 {
		add(InvSigned, "%d requests were rejected by a receiver holding the bot's secret (e.g. %s)", r.rejections, strings.Join(r.rejectDetail, "; "))
	}
	switch {
	case killed:
		add(InvCleanStop, "the engine did not exit within 15s of SIGTERM (killed)")
	case exitErr != nil:
		add(InvCleanStop, "after SIGTERM the engine exited with %v", exitErr)
	}
	for _, e := range r.harnessErrs {
		add(InvNoCrash, "%s", e)
	}
	if h.cfg.Reference && (ms.Scrapes == 0 || ms.Acked == 0 || ms.Sent == 0) {
		add(InvMetrics, "/metrics scraped %d times showed acked_total %v, sent_total %v; the delivery counters must be non-zero", ms.Scrapes, ms.Acked, ms.Sent)
	}
	if rep.Violations == nil {
		rep.Violations = []oracle.Violation{}
	}
	for _, v := range rep.Violations {
		if v.Invariant == oracle.InvNoSilentLoss {
			rep.Lost++
		}
	}
	// Verdicts: what this workload cannot exercise is said so.
	judged := append(oracle.Invariants(), InvSigned, InvCleanStop, InvNoCrash)
	if h.cfg.Reference {
		judged = append(judged, InvMetrics)
	}
	for _, inv := range judged {
		rep.Invariants[inv] = "PASS"
	}
	// retry-backoff and breaker-policy need the engine's clock at each send
	// and each answer it was told, which a real process does not report;
	// resend-with-cause, which answers reached the process and which of its
	// store's Acks committed (the harness sees the bots' side and polls the
	// queue); reported-counters and resume-from-cursor, what the process
	// was told by its store (its cursors, read over its own SQL
	// connection); settings-validation probes the engine in-process
	// (sim/settings.go); in-flight-limit pairs each request with the answer
	// the engine was told, by request number, which a real process does
	// not report; snapshot-progress needs snapshot sources, which this
	// workload does not have (nor a report of what the snapshot worker
	// handed a node).
	for _, inv := range []string{oracle.InvRetentionBounds, oracle.InvSnapshotConvergence, oracle.InvSnapshotIsolation,
		oracle.InvRetryBackoff, oracle.InvBreakerPolicy, oracle.InvReportedCounters, oracle.InvSettingsValidation,
		oracle.InvResumeFromCursor, oracle.InvInFlightLimit, oracle.InvResendWithCause,
		oracle.InvSnapshotProgress} {
		rep.Invariants[inv] = notJudged
	}
	// A check this workload cannot judge lacks observations it relies on
	// (above), so what it reports is not a verdict: it is kept beside the
	// violations, for a reader, and does not fail the run.
	kept := rep.Violations[:0]
	for _, v := range rep.Violations {
		if rep.Invariants[v.Invariant] == notJudged {
			rep.Unjudged = append(rep.Unjudged, v)
			continue
		}
		kept = append(kept, v)
		rep.Invariants[v.Invariant] = "FAIL"
	}
	rep.Violations = kept
	return rep
}

func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Latency{P50: ms(s[len(s)/2]), P99: ms(s[len(s)*99/100]), Max: ms(s[len(s)-1])}
}

// Failed reports whether the run broke any invariant.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func pgTarget(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("the Postgres DSN does not parse: %v", err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// withHost points a postgres:// URL DSN at addr.
func withHost(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("chaos needs a URL DSN (postgres://user@host:port/db?sslmode=disable) to route the engine through its proxy; got %q", dsn)
	}
	u.Host = addr
	return u.String(), nil
}

func createSchema(ctx context.Context, dsn, schema string) error {
	c, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		return pgstore.DescribeConnError(dsn, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(c, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

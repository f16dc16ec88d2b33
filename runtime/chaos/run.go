// The processes of a run: servers, bots, proxy and engine started, the fault plan carried out, the heal and the settle.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/internal/pgschema"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
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
	noObserve        bool       // the engine answered 404 on the observation endpoint
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
	plan := cfg.Schedule
	if plan == nil {
		plan = Plan(cfg, botIDs)
	}
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
	// A name gc recognises (dsim_run_<created>_<pid>_...): a harness killed
	// by SIGKILL cannot drop its schema, and gc then can.
	h.schema = pgschema.Name(pgschema.KindRun, fmt.Sprintf("chaos_%d", cfg.Seed%1_000_000), time.Now())
	if err := createSchema(ctx, cfg.DSN, h.schema); err != nil {
		return nil, err
	}
	defer func() {
		if derr := dropSchema(cfg.DSN, h.schema); derr != nil && err == nil {
			err = derr
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

	dir, logf, closeDir, err := workDir(TempPrefixRun)
	if err != nil {
		return nil, err
	}
	defer closeDir()

	h.rec = newRecorder()

	// The protocol servers and the bots.
	upURL, regURL, stopProto, err := h.serveProtocol()
	if err != nil {
		return nil, err
	}
	defer stopProto()
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
		b.poisons = id == "bot-2"
		h.bots = append(h.bots, b)
		h.byID[id] = b
	}
	h.setupWorld()

	if h.listen, err = stableAddr(); err != nil {
		return nil, err
	}

	argv := append(append([]string(nil), cfg.EngineCmd...),
		"--upstream", upURL, "--registry", regURL, "--listen", h.listen, "--dsn", proxied, "--schema", h.schema)
	env, err := stateEnv(dir, cfg.EngineEnv)
	if err != nil {
		return nil, err
	}
	h.eng = &engineProc{argv: argv, env: env, log: logf}
	defer h.eng.kill()

	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopBG()
		wg.Wait()
	}()

	h.start = time.Now()
	h.rec.start = h.start
	if err := h.eng.start(); err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); h.scrape(bg) }()
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
		return h.interrupted(ctx, plan, counts, restarts, err)
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
	h.rec.mark(true)
	h.rec.atHeal = h.observeUntil(ctx, 5*time.Second)
	_, open := h.rec.outstanding(h.judgeParams())
	h.progress("healed at %s; %d obligations open; waiting up to %s for quiescence", time.Since(h.start).Round(time.Millisecond), open, cfg.Settle)
	quiet, settled, r2, err := h.settle(ctx)
	restarts += r2
	if err != nil {
		return h.interrupted(ctx, plan, counts, restarts, err)
	}

	h.rec.atEnd = h.observeUntil(ctx, 5*time.Second)
	h.scrapeOnce(&http.Client{Timeout: 3 * time.Second}, true)
	h.rec.mark(false)
	exitErr, killed := h.eng.term(15 * time.Second)
	stopBG()
	wg.Wait()

	rep = h.report(plan, counts, restarts, quiet, settled, exitErr, killed)
	if len(rep.Violations) > 0 {
		rep.EngineLog = tail(filepath.Join(dir, "engine.log"), 40)
	}
	return rep, nil
}

// ErrInterrupted: the run's context ended (SIGINT, SIGTERM) before the
// run did; Run then returns a partial report beside it.
var ErrInterrupted = errors.New("interrupted")

// interrupted is the partial report of a run whose context ended: what was
// judged so far, the engine killed (the caller's defers reap it and drop
// the schema). Any other error is returned alone.
func (h *harness) interrupted(ctx context.Context, plan []faults.Fault, c faultCounts, restarts int, err error) (*Report, error) {
	if ctx.Err() == nil {
		return nil, err
	}
	h.eng.kill()
	h.rec.mark(false)
	rep := h.report(plan, c, restarts, false, 0, nil, false)
	rep.Interrupted = true
	// Obligations still open are not losses before the settle has run.
	for i, v := range rep.Verdicts {
		switch v.Invariant {
		case oracle.InvNoSilentLoss, oracle.InvLiveness, oracle.InvCursorProgress, oracle.InvCursorMonotonic, InvCleanStop:
			rep.Verdicts[i] = Verdict{Invariant: v.Invariant, Verdict: notJudged, Why: "interrupted before the settle"}
			rep.Invariants[v.Invariant] = notJudged
		}
	}
	kept := rep.Violations[:0]
	for _, v := range rep.Violations {
		if rep.Invariants[v.Invariant] != notJudged {
			kept = append(kept, v)
		}
	}
	rep.Violations, rep.Lost = kept, 0
	return rep, fmt.Errorf("%w: %v", ErrInterrupted, ctx.Err())
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
			h.rec.harnessError("the engine exited on its own during the fault phase (%s)", h.eng.exitDetail())
			restarts++
			if err := h.restartAfterExit(); err != nil {
				return c, restarts, err
			}
		}
		for next < len(plan) && !h.start.Add(plan[next].At).After(now) {
			a := plan[next]
			next++
			switch a.Kind {
			case faults.Crash:
				k := kill{at: time.Now(), planned: true}
				h.eng.kill()
				k.reaped = time.Now()
				c.kills++
				sleepCtx(ctx, a.RestartAfter)
				err := h.restart()
				k.up = time.Now()
				h.rec.killed(k)
				if err != nil {
					return c, restarts, err
				}
			case faults.StoreAmbiguous:
				now := time.Now()
				h.rec.dbFault(window{now, now}) // a cut is an instant
				h.proxy.cut()
				c.cuts++
			case faults.StoreError:
				// A stall fails calls by their timeout, which may come after
				// a commit: as ambiguous as a cut.
				h.rec.dbFault(window{time.Now(), time.Now().Add(a.Until - a.At)})
				go h.proxy.stall(a.Until-a.At, stop)
				c.cuts++
			default:
				b, m := h.byID[a.Bot], botModes[a.Kind]
				b.setMode(m)
				h.rec.botFault(botFault{bot: b.id, mode: m, w: window{time.Now(), time.Now().Add(a.Until - a.At)}})
				time.AfterFunc(a.Until-a.At, func() { b.clearMode(m) })
				c.bot++
			}
		}
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			owed, open := h.rec.outstanding(h.judgeParams())
			h.progress("%s: %d kills, %d db cuts, %d bot faults so far; %d obligations, %d open",
				time.Since(h.start).Round(time.Second), c.kills, c.cuts, c.bot, owed, open)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

func (h *harness) restart() error {
	return h.eng.start()
}

// restartAfterExit starts the engine again after it exited on its own; to
// the judge that is a kill at the instant it was noticed.
func (h *harness) restartAfterExit() error {
	k := kill{at: time.Now(), reaped: time.Now()}
	err := h.restart()
	k.up = time.Now()
	h.rec.killed(k)
	return err
}

// judgeParams are the judge's bounds for this run.
func (h *harness) judgeParams() judgeParams {
	e := h.cfg.Engine
	return judgeParams{
		MaxAttempts: e.MaxAttempts, WebhookTimeout: e.WebhookTimeout, Lease: e.Lease, StoreRetry: e.StoreRetry,
		KillWindow: h.cfg.KillWindow, HOLBound: 30 * time.Second, Healthy: "bot-0", Settle: h.cfg.Settle,
		Declared: e, Breaker: h.cfg.Breaker,
	}
}

// settle waits until every obligation is resolved (rules.go: resolved, the
// rule the judge applies too), or Settle passes; what it ended with is
// recorded for liveness (settled).
func (h *harness) settle(ctx context.Context) (bool, time.Duration, int, error) {
	start := time.Now()
	restarts := 0
	var lastObserve time.Time
	for {
		if ctx.Err() != nil {
			return false, 0, restarts, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if !h.eng.running() {
			h.rec.harnessError("the engine exited on its own after the heal (%s)", h.eng.exitDetail())
			restarts++
			if err := h.restartAfterExit(); err != nil {
				return false, 0, restarts, err
			}
		}
		if !h.noObserve && time.Since(lastObserve) >= time.Second {
			// Dead letters resolve obligations: read them as the settle goes.
			lastObserve = time.Now()
			o, why := h.observe(ctx)
			h.rec.observed(o, why)
			h.noObserve = strings.HasPrefix(why, "answered 404")
		}
		if quiet := h.rec.settled(h.judgeParams()); quiet || time.Since(start) > h.cfg.Settle {
			return quiet, time.Since(start), restarts, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

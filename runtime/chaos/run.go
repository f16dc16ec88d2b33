// The processes of a run: servers, bots, proxy and engine started, the fault plan carried out, the heal and the settle.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
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
	// after runs f once d has passed (time.AfterFunc unless a test holds
	// the clock).
	after func(d time.Duration, f func())
	snap  *snapWorld // snapshot sources, if the engine declares them

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

	// Aimed kills (schedule.go): armed ones wait for their moment (aimed);
	// then the kill comes at the Call-th store write the engine makes
	// after it (durable), or Delay after the moment if fewer come. The
	// goroutine that sees that write signals the engine at once (a
	// moment lasts milliseconds); the fault phase, which owns the engine
	// process, reaps it and restarts it.
	aimMu     sync.Mutex
	armed     []*armedKill
	watching  []*armedKill // their moment came; counting writes
	aimClosed bool         // the fault phase is over: no aimed kill fires
	fire      chan *armedKill
	kills     []killDone // every kill of the fault phase, for coverage
}

// armedKill is an aimed kill waiting for its moment, then for writes.
type armedKill struct {
	f        faults.Fault
	deadline time.Time // aimPatience after arming: then it comes anyway
	writes   int       // store writes still to see after the moment
	fired    bool      // signalled (under aimMu)
	at       time.Time // when it was signalled
}

// killDone is one kill the fault phase carried out.
type killDone struct {
	aim    string // the moment it was aimed at and hit, or "" (a random instant)
	at, up time.Time
}

// aimed is called at a protocol moment: the first kill armed for it
// starts counting the engine's store writes. It never blocks (the
// upstream, the bots and the producer call it, the producer under the
// recorder's lock).
func (h *harness) aimed(moment string) {
	h.aimMu.Lock()
	defer h.aimMu.Unlock()
	for i, a := range h.armed {
		if a.f.After == moment {
			h.armed = append(h.armed[:i:i], h.armed[i+1:]...)
			a.writes = max(a.f.Call, 1)
			h.watching = append(h.watching, a)
			time.AfterFunc(a.f.Delay, func() {
				h.aimMu.Lock()
				defer h.aimMu.Unlock()
				h.fireLocked(a)
			})
			return
		}
	}
}

// durable is called when a store write of the engine's is seen: an
// answer from its database through the proxy, or a write to a file in
// its state directory. A kill aimed at a moment comes at the Call-th one
// after it: between two writes of one hand-off (a cursor made durable
// before the deliveries it passes, a delivery recorded before its cursor).
func (h *harness) durable() {
	h.aimMu.Lock()
	defer h.aimMu.Unlock()
	for _, a := range h.watching {
		if a.writes--; a.writes == 0 {
			h.fireLocked(a)
		}
	}
}

// fireLocked signals the engine for a, once, and hands a to the fault
// phase to reap and restart.
func (h *harness) fireLocked(a *armedKill) {
	if a.fired || h.aimClosed {
		return
	}
	a.fired, a.at = true, time.Now()
	h.watching = slices.DeleteFunc(h.watching, func(b *armedKill) bool { return b == a })
	// Handed over before the signal: the fault phase, seeing the engine
	// gone, finds this kill in fire and does not take it for an exit on its
	// own (seen under load 30 when the signal came first).
	select {
	case h.fire <- a:
	default:
		// The channel holds every aimed kill of a plan of up to 64.
		h.rec.harnessError("an aimed kill could not be handed to the fault phase")
		return
	}
	h.eng.signal()
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
	h := &harness{cfg: cfg, byID: map[string]*bot{}, fire: make(chan *armedKill, 64)}
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
	h.proxy.mu.Lock()
	h.proxy.onAnswer = h.durable
	h.proxy.mu.Unlock()
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
		b.chooses = id != "bot-0"
		b.onOK = func() { h.aimed(aimOK) }
		h.bots = append(h.bots, b)
		h.byID[id] = b
	}
	h.setupWorld()
	if cfg.Snapshots {
		if h.snap, err = newSnapWorld(cfg.Seed, h.rec, cfg.Engine.WebhookTimeout); err != nil {
			return nil, err
		}
		defer h.snap.close()
		h.snap.register(h.reg)
	}

	if h.listen, err = stableAddr(); err != nil {
		return nil, err
	}

	argv := append(append([]string(nil), cfg.EngineCmd...),
		"--upstream", upURL, "--registry", regURL, "--listen", h.listen, "--dsn", proxied, "--schema", h.schema)
	env, err := stateEnv(dir, cfg.EngineEnv)
	if err != nil {
		return nil, err
	}
	// An engine keeping its state in files makes it durable there: aimed
	// kills count those writes as they count database answers.
	stopWatch, err := watchWrites(filepath.Join(dir, "state"), h.durable)
	if err != nil {
		return nil, fmt.Errorf("watching the engine's state directory: %w", err)
	}
	defer stopWatch()
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
	snapDone := make(chan struct{})
	go func() {
		defer close(snapDone)
		if h.snap != nil {
			h.snap.run(prodCtx, h.rec, cfg.Duration)
		}
	}()
	stopProd := func() { cancelProd(); <-prodDone; <-snapDone }
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
	h.progress("healed at %s; %d obligations open; waiting for quiescence (giving up after %s with none resolved, or %s in all)", time.Since(h.start).Round(time.Millisecond), open, cfg.Settle, settleCapFactor*cfg.Settle)
	quiet, settled, r2, err := h.settle(ctx)
	restarts += r2
	if err != nil {
		return h.interrupted(ctx, plan, counts, restarts, err)
	}

	h.rec.atEnd = h.observeSettled(ctx)
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
// restarted whenever it exits on its own (counted as unexpected). A kill
// at a random instant comes at its At; an aimed one is armed there and
// comes when its moment does (aimed). The restart after a kill is due
// RestartAfter later, while the other faults go on.
func (h *harness) faultPhase(ctx context.Context, plan []faults.Fault) (faultCounts, int, error) {
	var c faultCounts
	restarts := 0
	stop := make(chan struct{})
	defer close(stop)
	end := h.start.Add(h.cfg.Duration)
	next := 0
	lastReport := time.Now()
	// down: the engine was killed and its restart is due at restartAt.
	var down *kill
	var restartAt time.Time
	var downAim string
	restartNow := func() error {
		err := h.restart()
		down.up = time.Now()
		h.rec.killed(*down)
		h.kills = append(h.kills, killDone{aim: downAim, at: down.at, up: down.up})
		down = nil
		return err
	}
	// killNow kills the engine (already signalled at signalled, for an
	// aimed kill) and makes its restart due RestartAfter later.
	// owed: kills that came while the engine was still down. Each comes
	// as soon as it is up again (a kill on a boot): on a loaded machine a
	// restart can run late, and a plan's kill must not be lost to that.
	var owed []faults.Fault
	killNow := func(f faults.Fault, aim string, signalled time.Time) {
		if down != nil {
			h.progress("%s: %s postponed: the engine is still down; it comes when the engine is up", time.Since(h.start).Round(time.Millisecond), describe(f))
			owed = append(owed, f)
			return
		}
		k := kill{at: time.Now(), planned: true}
		if !signalled.IsZero() {
			k.at = signalled
		}
		h.eng.kill()
		k.reaped = time.Now()
		c.kills++
		down, restartAt, downAim = &k, time.Now().Add(f.RestartAfter), aim
	}
	takeFired := func() {
		for {
			select {
			case a := <-h.fire:
				killNow(a.f, a.f.After, a.at)
			default:
				return
			}
		}
	}
	defer func() {
		h.aimMu.Lock()
		h.armed, h.watching, h.aimClosed = nil, nil, true
		h.aimMu.Unlock()
	}()
	for {
		// First the aimed kills signalled meanwhile: their engine is gone,
		// and that is no exit on its own.
		takeFired()
		now := time.Now()
		if down != nil && !now.Before(restartAt) {
			if err := restartNow(); err != nil {
				return c, restarts, err
			}
			if len(owed) > 0 && now.Before(end) {
				f := owed[0]
				owed = owed[1:]
				killNow(f, "", time.Time{})
			}
		}
		if now.After(end) {
			h.aimMu.Lock()
			h.aimClosed = true
			pending := append(h.armed, h.watching...)
			h.armed, h.watching = nil, nil
			h.aimMu.Unlock()
			takeFired()
			// Armed kills whose moment did not come, and kills owed, come
			// now as kills at an instant (one, if the engine is up).
			for _, a := range pending {
				killNow(a.f, "", time.Time{})
			}
			for _, f := range owed {
				h.progress("%s not carried out: the fault phase ended with the engine down", describe(f))
			}
			if down != nil {
				// The heal needs the engine up: its restart comes now.
				if err := restartNow(); err != nil {
					return c, restarts, err
				}
			}
			return c, restarts, nil
		}
		if ctx.Err() != nil {
			return c, restarts, fmt.Errorf("interrupted: %w", ctx.Err())
		}
		if down == nil && !h.eng.running() {
			takeFired() // an aimed kill that came between the two checks
			if down == nil {
				h.rec.harnessError("the engine exited on its own during the fault phase (%s)", h.eng.exitDetail())
				restarts++
				if err := h.restartAfterExit(); err != nil {
					return c, restarts, err
				}
			}
		}
		// Armed kills whose moment did not come in time come now.
		h.aimMu.Lock()
		var late []*armedKill
		for len(h.armed) > 0 && now.After(h.armed[0].deadline) {
			late = append(late, h.armed[0])
			h.armed = h.armed[1:]
		}
		h.aimMu.Unlock()
		for _, a := range late {
			killNow(a.f, "", time.Time{})
		}
		for next < len(plan) && !h.start.Add(plan[next].At).After(now) {
			a := plan[next]
			next++
			switch a.Kind {
			case faults.Crash:
				if a.After != "" {
					h.aimMu.Lock()
					h.armed = append(h.armed, &armedKill{f: a, deadline: time.Now().Add(aimPatience)})
					h.aimMu.Unlock()
					continue
				}
				killNow(a, "", time.Time{})
			case faults.StoreAmbiguous:
				now := time.Now()
				h.rec.dbFault(window{now, now}) // a cut is an instant
				h.proxy.cut()
				c.cuts++
			case faults.StoreError:
				// A stall fails calls by their timeout, which may come after
				// a commit: as ambiguous as a cut.
				// The window ends when the proxy forwards again, not when
				// the plan said: on a loaded machine the harness's own timer
				// and the cut of every stalled connection came 1.7 s late
				// (the reference's store calls all failed then), time the
				// engine could not use its database.
				from, d := time.Now(), a.Until-a.At
				i := h.rec.dbFault(window{from, from.Add(d)})
				go func() {
					h.proxy.stall(d, stop)
					h.rec.dbFaultEnded(i, time.Now())
				}()
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
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case a := <-h.fire:
			killNow(a.f, a.f.After, a.at)
		case <-t.C:
		}
		t.Stop()
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
		Declared: e, Breaker: h.cfg.Breaker, Snapshots: h.cfg.Snapshots, Retention: h.cfg.Retention,
	}
}

// settle waits until every obligation is resolved (rules.go: resolved, the
// rule the judge applies too), or until the engine stalls (settleOver);
// what it ended with is recorded for liveness (settled).
func (h *harness) settle(ctx context.Context) (bool, time.Duration, int, error) {
	start := time.Now()
	restarts := 0
	var lastObserve time.Time
	least, progressed := -1, start
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
		quiet := h.rec.settled(h.judgeParams())
		quiet = h.rec.snapSettled() && quiet
		now := time.Now()
		if n := h.rec.settleLeft(); least < 0 || n < least {
			least, progressed = n, now
		}
		if quiet {
			return true, now.Sub(start), restarts, nil
		}
		if why := settleOver(now.Sub(start), now.Sub(progressed), h.cfg.Settle); why != "" {
			h.rec.settleGaveUp(why)
			return false, now.Sub(start), restarts, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// settleCapFactor bounds the whole settle at this many Settles.
const settleCapFactor = 5

// settleOver is the settle's stop rule: it gives up once nothing has
// resolved for Settle (the engine stalled), or after settleCapFactor
// Settles in all. A fixed wait from the heal made liveness a race against
// the machine's load: at load 16-28 a correct engine that was still
// resolving obligations steadily failed it (issue 38). An engine that
// stops resolving is caught as soon as before; one that keeps resolving
// gets the longer wait. It returns why it gave up, or "".
func settleOver(sinceHeal, sinceProgress, settle time.Duration) string {
	switch {
	case sinceProgress > settle:
		return fmt.Sprintf("none resolved in the last %s (the settle bound, --settle)", settle)
	case sinceHeal > settleCapFactor*settle:
		return fmt.Sprintf("they were still resolving, but the settle waits at most %d x --settle (%s) in all", settleCapFactor, settleCapFactor*settle)
	}
	return ""
}

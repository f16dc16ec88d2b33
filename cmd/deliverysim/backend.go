package main

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgschema"
	"github.com/deliverysim/deliverysim/sim"
)

// pgRun is a store in a schema of its own: closing it drops the schema, so
// every run starts empty and leaves nothing behind.
type pgRun struct {
	*pgstore.Store
	a      *app
	dsn    string
	schema string
}

func (p *pgRun) Close() error {
	p.a.health.forget(p)
	_ = p.Store.Close()
	// Not the invocation's context: after SIGINT the schema must still go.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.a.ctx), 30*time.Second)
	defer cancel()
	return pgstore.DropSchema(ctx, p.dsn, p.schema)
}

func schemaName(seed uint64) string {
	return pgschema.Name(pgschema.KindRun, "seed"+strconv.FormatUint(seed, 10), time.Now())
}

// storeFactory returns the sim's store constructor for the backend.
func (a *app) storeFactory(c *common, seed uint64) func() (impl.Store, error) {
	if c.backend != "postgres" {
		return nil // sim's default: memstore
	}
	return func() (impl.Store, error) {
		if err := a.health.lostErr(); err != nil {
			return nil, err
		}
		schema := schemaName(seed)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), time.Minute)
		defer cancel()
		a.log.Debug("opening postgres schema", "seed", seed, "schema", schema)
		s, err := pgstore.Open(ctx, c.dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 2})
		if err != nil {
			_ = pgstore.DropSchema(ctx, c.dsn, schema)
			// A failed open is one failed probe; one more in a row and the
			// database is gone, before the next seed fails the same way.
			if perr := probe(ctx, c.dsn); perr != nil {
				a.health.declareLost(c.dsn, perr)
			}
			return nil, &envError{err: pgstore.DescribeConnError(c.dsn, err)}
		}
		p := &pgRun{Store: s, a: a, dsn: c.dsn, schema: schema}
		a.health.track(p)
		return p, nil
	}
}

// checkBackend fails fast, with one line, when the backend is unreachable,
// and then watches it for the rest of the invocation.
func (a *app) checkBackend(c *common) error {
	if c.backend != "postgres" {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return &envError{err: pgstore.DescribeConnError(c.dsn, err)}
	}
	if err := conn.Close(ctx); err != nil {
		return err
	}
	a.health.watch(a, c.dsn)
	return nil
}

// simContext is every simulation's sim.Config.Context: a run stops at its
// next event when the invocation is interrupted (SIGINT, SIGTERM), and on
// Postgres also when the server goes away. Without it a long run ignored
// the signal until its virtual deadline, minutes of wall time.
func (a *app) simContext(c *common) context.Context {
	if c.backend == "postgres" {
		return a.health.context(a.ctx)
	}
	return a.ctx
}

// traceKept is how much of a run's trace simulate keeps.
type traceKept int

const (
	traceFull traceKept = iota // every record
	traceHash                  // only the hash (sim.Config.TraceHashOnly), for callers that read no trace text
	traceNone                  // nothing (sim.Config.NoTrace), for callers that read not even the hash
)

// simulate runs one seed with the invocation's settings, keeping as much
// of its trace as kept says.
func (a *app) simulate(c *common, seed uint64, kept traceKept) (*sim.Result, error) {
	cfg := sim.Config{Seed: seed, Bugs: c.bugs, Plan: c.plan, Store: a.storeFactory(c, seed), Context: a.simContext(c),
		TraceHashOnly: kept == traceHash, NoTrace: kept == traceNone}
	start := time.Now()
	r, err := sim.Run(cfg)
	if lost := a.health.lostErr(); lost != nil && c.backend == "postgres" {
		// Whatever the run saw after the server went away is not a verdict
		// on the engine.
		return nil, lost
	}
	if err != nil {
		return nil, err
	}
	a.log.Debug("simulated", "seed", seed, "backend", c.backend, "elapsed", time.Since(start),
		"trace_lines", r.TraceLines, "violations", len(r.Violations))
	return r, nil
}

// Health watching: when the server goes away mid-sweep, the runs in flight
// would otherwise retry every store call (each a connect attempt) until
// their virtual deadline, minutes of wall time per seed. The watcher probes
// the server every healthEvery; after healthFailures probes in a row fail,
// it closes every open run's pool (their calls then fail at once) and
// every seed from then on fails at once with the probe's error.
const (
	healthEvery    = 2 * time.Second
	healthTimeout  = 3 * time.Second
	healthFailures = 2
)

type pgHealth struct {
	mu      sync.Mutex
	started bool
	lost    error
	open    map[*pgRun]bool
	// ctx is every Postgres run's sim.Config.Context: cancelled, with lost
	// as its cause, when the server goes away, which stops the runs in
	// flight at their next event.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// context is done when the server is lost (its cause says so) or when
// parent (the invocation's context) is.
func (h *pgHealth) context(parent context.Context) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(parent)
	}
	return h.ctx
}

func (h *pgHealth) track(p *pgRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open == nil {
		h.open = map[*pgRun]bool{}
	}
	h.open[p] = true
	if h.lost != nil {
		go p.Store.Close()
	}
}

func (h *pgHealth) forget(p *pgRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.open, p)
}

func (h *pgHealth) lostErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

func (h *pgHealth) watch(a *app, dsn string) {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return
	}
	h.started = true
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithoutCancel(a.ctx))
	a.atExit = append(a.atExit, cancel)
	go func() {
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		fails := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := probe(ctx, dsn)
			if err == nil || ctx.Err() != nil {
				fails = 0
				continue
			}
			if fails++; fails < healthFailures {
				continue
			}
			h.declareLost(dsn, err)
			return
		}
	}()
}

// declareLost records that the server is gone (err: the failed probe):
// the runs in flight are stopped and their pools closed, and every later
// seed fails at once.
func (h *pgHealth) declareLost(dsn string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return
	}
	h.lost = &envError{err: fmt.Errorf("the database went away mid-run (%v); the runs in flight were abandoned",
		pgstore.DescribeConnError(dsn, err))}
	if h.cancel != nil {
		h.cancel(h.lost)
	}
	for p := range h.open {
		go p.Store.Close()
	}
}

func probe(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = healthTimeout
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

var kvPassword = regexp.MustCompile(`(?i)(^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)\s*`)

// redactDSN removes the password from a DSN (URL or key=value form), so it
// can be printed: in reproduce lines, reports and logs.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.User(u.User.Username())
			}
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return strings.TrimSpace(kvPassword.ReplaceAllString(dsn, "$1"))
}

// hasPassword reports whether redactDSN removed anything.
func hasPassword(dsn string) bool { return redactDSN(dsn) != dsn }

// Package peer measures the reference engine's queued replay beside River
// (github.com/riverqueue/river), the PostgreSQL job queue a Go user would
// otherwise pick, on the same server in alternating runs.
//
// What is compared: N items, each made durable as one row, worked, and
// finished with one more durable write. River inserts N no-op jobs with
// InsertMany in batches, then a client with a tuned worker count works them
// until every completion has been reported (the way River's own benchmark
// burns jobs down); the clock covers the inserts and the work. The engine
// replays N events to one bot with the queued hand-off: each delivery is a
// queue row inserted leased, sent to a bot that answers 2xx at once, and
// deleted by the acknowledgement; the clock covers the same span (first
// insert to last acknowledgement). Neither side's data generation or
// schema set-up is timed.
//
// This is the only package that imports River: the dependency stays out of
// the engine, the stores and the simulator.
package peer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/deliverysim/deliverysim/bench"
	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// Config is one side-by-side measurement. Zero fields take the defaults
// noted on them.
type Config struct {
	DSN  string // required: the server both sides run on
	Jobs int    // items per run on each side (default 200000)
	// Rounds is how many times each side runs, alternating deliverysim,
	// River, deliverysim, River... (default 3). Rates are the medians.
	Rounds int
	// RiverWorkers is River's MaxWorkers for the one queue (default 1000:
	// River's benchmark comments found about 1k best, and 500, 2000 and
	// 10k slower on this machine's 2 cores too).
	RiverWorkers int
	// InsertBatch is jobs per River InsertMany call (default 5000, as
	// River's benchmark).
	InsertBatch int
	// Progress receives one line per run (nil: none). River's own log
	// (warnings and errors only) goes here too.
	Progress io.Writer
}

// Result is the measurement. The JSON field names are the CLI's.
type Result struct {
	Jobs         int `json:"jobs"`
	Rounds       int `json:"rounds"`
	RiverWorkers int `json:"river_workers"`
	InsertBatch  int `json:"river_insert_batch"`

	// Medians over the rounds, in items per second.
	DeliverysimPerSecond float64 `json:"deliverysim_per_second"`
	RiverPerSecond       float64 `json:"river_per_second"`
	// Ratio = DeliverysimPerSecond / RiverPerSecond.
	Ratio float64 `json:"ratio"`

	DeliverysimRuns []float64  `json:"deliverysim_runs"`
	RiverRuns       []RiverRun `json:"river_runs"`
}

// RiverRun is one River burn-down: inserting, then working.
type RiverRun struct {
	InsertSeconds float64 `json:"insert_seconds"`
	WorkSeconds   float64 `json:"work_seconds"`
	PerSecond     float64 `json:"per_second"`
}

// Summary is the result in one line for people.
func (r Result) Summary() string {
	return fmt.Sprintf("peer: %d items, median of %d alternating runs: deliverysim queued replay %.0f/s, River (%d workers) %.0f/s; ratio %.2f",
		r.Jobs, r.Rounds, r.DeliverysimPerSecond, r.RiverWorkers, r.RiverPerSecond, r.Ratio)
}

func (c *Config) defaults() error {
	if c.Jobs == 0 {
		c.Jobs = 200000
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.RiverWorkers == 0 {
		c.RiverWorkers = 1000
	}
	if c.InsertBatch == 0 {
		c.InsertBatch = 5000
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	switch {
	case c.DSN == "":
		return errors.New("peer: a DSN is needed; pass --dsn or set DELIVERYSIM_PG_DSN")
	case c.Jobs < 0 || c.Rounds < 0 || c.RiverWorkers < 0 || c.InsertBatch < 0:
		return errors.New("peer: jobs, rounds, workers and insert batch must not be negative")
	case c.Jobs < 4:
		return fmt.Errorf("peer: %d jobs is too few to measure; use at least 4", c.Jobs)
	}
	return nil
}

// Run measures both sides Rounds times each, alternating, and returns the
// medians. River works in a database of its own, created here and dropped
// before Run returns; the engine's replay makes and drops its own schema.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	res = Result{Jobs: cfg.Jobs, Rounds: cfg.Rounds, RiverWorkers: cfg.RiverWorkers, InsertBatch: cfg.InsertBatch}
	rv, err := openRiver(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := rv.close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for round := 1; round <= cfg.Rounds; round++ {
		ds, err := bench.Replay(ctx, bench.ReplayConfig{
			Backend: bench.BackendPostgres, HandOff: bench.HandOffQueued, DSN: cfg.DSN,
			Events: cfg.Jobs, Bots: 1, SkipBaseline: true,
		})
		if err != nil {
			return res, err
		}
		res.DeliverysimRuns = append(res.DeliverysimRuns, ds.EventsPerSecond)
		fmt.Fprintf(cfg.Progress, "bench peer: round %d/%d: deliverysim queued replay %.0f/s\n", round, cfg.Rounds, ds.EventsPerSecond)

		rr, err := rv.burnDown(ctx, cfg)
		if err != nil {
			return res, err
		}
		res.RiverRuns = append(res.RiverRuns, rr)
		fmt.Fprintf(cfg.Progress, "bench peer: round %d/%d: River %.0f/s (insert %.2fs, work %.2fs)\n", round, cfg.Rounds, rr.PerSecond, rr.InsertSeconds, rr.WorkSeconds)
	}
	res.DeliverysimPerSecond = median(res.DeliverysimRuns)
	rates := make([]float64, len(res.RiverRuns))
	for i, r := range res.RiverRuns {
		rates[i] = r.PerSecond
	}
	res.RiverPerSecond = median(rates)
	if res.RiverPerSecond > 0 {
		res.Ratio = res.DeliverysimPerSecond / res.RiverPerSecond
	}
	return res, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// riverDB is River's database: created on the server, migrated, and dropped
// by close.
type riverDB struct {
	adminDSN string
	db       string
	pool     *pgxpool.Pool
	log      *slog.Logger
}

func openRiver(ctx context.Context, cfg Config) (*riverDB, error) {
	var r [4]byte
	_, _ = rand.Read(r[:])
	rv := &riverDB{
		adminDSN: cfg.DSN,
		db:       fmt.Sprintf("deliverysim_peer_%d_%s", os.Getpid(), hex.EncodeToString(r[:])),
		log:      slog.New(slog.NewTextHandler(cfg.Progress, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := rv.admin(ctx, "CREATE DATABASE "+pgx.Identifier{rv.db}.Sanitize()); err != nil {
		return nil, fmt.Errorf("peer: create River's database: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err == nil {
		pcfg.ConnConfig.Database = rv.db
		pcfg.ConnConfig.RuntimeParams["application_name"] = "deliverysim-bench-river"
		rv.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	}
	if err == nil {
		var mig *rivermigrate.Migrator[pgx.Tx]
		mig, err = rivermigrate.New(riverpgxv5.New(rv.pool), &rivermigrate.Config{Logger: rv.log})
		if err == nil {
			_, err = mig.Migrate(ctx, rivermigrate.DirectionUp, nil)
		}
	}
	if err != nil {
		_ = rv.close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("peer: set up River: %w", err)
	}
	return rv, nil
}

func (rv *riverDB) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, rv.adminDSN)
	if err != nil {
		return pgstore.DescribeConnError(rv.adminDSN, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// close drops River's database (WITH (FORCE) ends any session River left).
func (rv *riverDB) close(ctx context.Context) error {
	if rv.pool != nil {
		rv.pool.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := rv.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{rv.db}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("peer: drop River's database %s: %w", rv.db, err)
	}
	return nil
}

// noopArgs is the job: nothing to do, so the run measures the queue.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "deliverysim_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// burnDown empties the job table, inserts cfg.Jobs jobs in batches, then
// starts a client and waits until every job's completion was reported.
func (rv *riverDB) burnDown(ctx context.Context, cfg Config) (RiverRun, error) {
	// As River's benchmark: start every run from an empty, compact table.
	if _, err := rv.pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return RiverRun{}, fmt.Errorf("peer: empty river_job: %w", err)
	}
	if _, err := rv.pool.Exec(ctx, "VACUUM FULL river_job"); err != nil {
		return RiverRun{}, fmt.Errorf("peer: vacuum river_job: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(rv.pool), &river.Config{
		// River's benchmark settings: fetch often, so workers never idle
		// while jobs are available.
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            rv.log,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.RiverWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return RiverRun{}, fmt.Errorf("peer: River client: %w", err)
	}
	// Completions are counted from the subscription, as River's benchmark
	// does: it reports a job only after the completer has written it. The
	// channel holds every event, so none is dropped.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: cfg.Jobs,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	params := make([]river.InsertManyParams, 0, cfg.InsertBatch)
	start := time.Now()
	for from := 0; from < cfg.Jobs; from += cfg.InsertBatch {
		params = params[:0]
		for i := from; i < min(from+cfg.InsertBatch, cfg.Jobs); i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: i}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return RiverRun{}, fmt.Errorf("peer: River InsertMany: %w", err)
		}
	}
	inserted := time.Now()
	if err := client.Start(ctx); err != nil {
		return RiverRun{}, fmt.Errorf("peer: start River: %w", err)
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()

	// A stall (no completion for a minute) ends the run instead of hanging.
	stall := time.NewTimer(time.Minute)
	defer stall.Stop()
	for done := 0; done < cfg.Jobs; {
		select {
		case ev, ok := <-events:
			if !ok {
				return RiverRun{}, fmt.Errorf("peer: River's subscription closed after %d of %d jobs", done, cfg.Jobs)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return RiverRun{}, fmt.Errorf("peer: River job %d ended %s, want completed", ev.Job.ID, ev.Kind)
			}
			done++
			stall.Reset(time.Minute)
		case <-stall.C:
			return RiverRun{}, fmt.Errorf("peer: River completed no job for a minute (%d of %d done)", done, cfg.Jobs)
		case <-ctx.Done():
			return RiverRun{}, ctx.Err()
		}
	}
	end := time.Now()
	// Not timed: the table must hold exactly the jobs, all completed.
	var completed, total int
	if err := rv.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FROM river_job").Scan(&completed, &total); err != nil {
		return RiverRun{}, fmt.Errorf("peer: count River's jobs: %w", err)
	}
	if completed != cfg.Jobs || total != cfg.Jobs {
		return RiverRun{}, fmt.Errorf("peer: River's table holds %d jobs, %d completed; want %d, all completed", total, completed, cfg.Jobs)
	}
	rr := RiverRun{InsertSeconds: inserted.Sub(start).Seconds(), WorkSeconds: end.Sub(inserted).Seconds()}
	rr.PerSecond = float64(cfg.Jobs) / end.Sub(start).Seconds()
	return rr, nil
}

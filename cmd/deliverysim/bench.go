package main

import (
	"fmt"
	"os"

	"github.com/deliverysim/deliverysim/bench"
	"github.com/deliverysim/deliverysim/bench/peer"
)

// The ranges of bench replay's flags.
const (
	maxReplayEvents     = 10_000_000
	maxReplayStreams    = 10_000
	maxReplayBots       = 10_000
	maxReplayBatch      = 100_000
	maxReplayDeliveries = 20_000_000 // events x bots
)

// cmdBench dispatches `deliverysim bench <what>`: replay, or peer (the
// queued replay beside River). The Go benchmarks (make bench) cover the
// simulator and checker costs.
func (a *app) cmdBench(args []string) (int, error) {
	if len(args) > 0 && args[0] == "peer" {
		return a.cmdBenchPeer(args[1:])
	}
	if len(args) == 0 || args[0] != "replay" {
		return 2, usagef("bench: use `deliverysim bench replay [--backend memory|postgres] [--handoff direct|queued] [--events N] [--streams S] [--bots B] [--batch N] [--separate-writes] [--cpuprofile FILE] [--json]` or `deliverysim bench peer [--dsn DSN] [--jobs N] [--rounds R] [--json]`")
	}
	fs := newFlagSet("bench replay", a.stderr)
	backend := fs.String("backend", "memory", "memory or postgres")
	dsn := fs.String("dsn", "", "Postgres DSN (default: $DELIVERYSIM_PG_DSN)")
	events := fs.Int("events", 100000, "events after the stored cursors, over all streams")
	streams := fs.Int("streams", 4, "streams, each with a stored cursor")
	bots := fs.Int("bots", 1, "bots, each a member of every stream")
	batch := fs.Int("batch", 1000, "events per upstream batch")
	handoff := fs.String("handoff", bench.HandOffDirect, "engine hand-off: direct (no queue row unless an attempt fails; the cursor waits for answers) or queued (a row per delivery)")
	separate := fs.Bool("separate-writes", false, "queued hand-off: write each batch's acks and cursor in store calls of their own (engine AckDelay 0) instead of with the next batch's insert")
	asJSON := fs.Bool("json", false, "print one JSON object")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the timed replay (not the baselines) to this file")
	if err := a.parse(fs, args[1:]); err != nil {
		return 2, err
	}
	// The backend and DSN are resolved as for every other command.
	c := common{backend: *backend, dsn: *dsn}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if *handoff != bench.HandOffDirect && *handoff != bench.HandOffQueued {
		return 2, usagef("bench replay: --handoff %q is not a hand-off; use direct or queued", *handoff)
	}
	cfg := bench.ReplayConfig{Backend: c.backend, HandOff: *handoff, DSN: c.dsn, Events: *events, Streams: *streams, Bots: *bots, BatchSize: *batch, SeparateWrites: *separate}
	if *events <= 0 || *streams <= 0 || *bots <= 0 || *batch <= 0 {
		return 2, usagef("bench replay: --events, --streams, --bots and --batch must be positive")
	}
	// The replay holds a message per (bot, event) pair, so its memory is
	// proportional to events x bots: bounded here, and said so.
	switch {
	case *events > maxReplayEvents:
		return 2, usagef("bench replay: --events %d is more than %d", *events, maxReplayEvents)
	case *streams > maxReplayStreams || *streams > *events:
		return 2, usagef("bench replay: --streams %d is outside [1, min(--events, %d)]", *streams, maxReplayStreams)
	case *bots > maxReplayBots:
		return 2, usagef("bench replay: --bots %d is more than %d", *bots, maxReplayBots)
	case *batch > maxReplayBatch:
		return 2, usagef("bench replay: --batch %d is more than %d", *batch, maxReplayBatch)
	case int64(*events)*int64(*bots) > maxReplayDeliveries:
		return 2, usagef("bench replay: --events x --bots = %d deliveries; at most %d (memory grows with their number)", int64(*events)*int64(*bots), int64(maxReplayDeliveries))
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return 2, usagef("bench replay: --cpuprofile: %v", err)
		}
		defer f.Close()
		cfg.CPUProfile = f
	}
	fmt.Fprintf(a.stderr, "bench replay: %s, %s hand-off, %d events, %d streams, %d bots (filling the store first)...\n", cfg.Backend, cfg.HandOff, cfg.Events, cfg.Streams, cfg.Bots)
	res, err := bench.Replay(a.ctx, cfg)
	if a.interrupted() {
		// What was measured so far (the fields of stages not reached stay
		// zero); Replay drops its schema on the way out.
		if *asJSON {
			_ = writeJSON(a.stdout, struct {
				SchemaVersion int  `json:"schema_version"`
				Interrupted   bool `json:"interrupted"`
				bench.ReplayResult
			}{schemaVersion, true, res})
		} else {
			fmt.Fprintln(a.stdout, "bench replay: interrupted; no measurement")
		}
		return exitInterrupted, nil
	}
	if err != nil {
		// Replay's store and baseline already describe a server that cannot
		// be reached (pgstore.DescribeConnError) in one line.
		return 2, &envError{err: err}
	}
	if *asJSON {
		return 0, writeJSON(a.stdout, struct {
			SchemaVersion int `json:"schema_version"`
			bench.ReplayResult
		}{schemaVersion, res})
	}
	fmt.Fprintln(a.stdout, res.Summary())
	return 0, nil
}

// cmdBenchPeer runs `deliverysim bench peer`: the queued Postgres replay
// and River burning down the same number of no-op jobs, alternating.
func (a *app) cmdBenchPeer(args []string) (int, error) {
	fs := newFlagSet("bench peer", a.stderr)
	dsn := fs.String("dsn", "", "Postgres DSN (default: $DELIVERYSIM_PG_DSN, else the local server)")
	jobs := fs.Int("jobs", 200000, "items per run on each side: River jobs, replayed events")
	rounds := fs.Int("rounds", 3, "runs per side, alternating deliverysim and River; rates are medians")
	workers := fs.Int("river-workers", 1000, "River's MaxWorkers")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := a.parse(fs, args); err != nil {
		return 2, err
	}
	if *jobs < 4 || *rounds <= 0 || *workers <= 0 {
		return 2, usagef("bench peer: --jobs must be at least 4, --rounds and --river-workers positive")
	}
	c := common{backend: "postgres", dsn: *dsn}
	if err := c.finish(a); err != nil {
		return 2, err
	}
	if err := a.checkBackend(&c); err != nil {
		return 2, err
	}
	fmt.Fprintf(a.stderr, "bench peer: %d items, %d rounds of deliverysim then River...\n", *jobs, *rounds)
	res, err := peer.Run(a.ctx, peer.Config{DSN: c.dsn, Jobs: *jobs, Rounds: *rounds, RiverWorkers: *workers, Progress: a.stderr})
	if err != nil {
		return 2, &envError{err: err}
	}
	if *asJSON {
		return 0, writeVersionedJSON(a.stdout, res)
	}
	fmt.Fprintln(a.stdout, res.Summary())
	return 0, nil
}

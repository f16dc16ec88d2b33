package main

import (
	"fmt"

	"github.com/deliverysim/deliverysim/bench"
)

// cmdBench dispatches `deliverysim bench <what>`; only replay exists. The
// Go benchmarks (make bench) cover the simulator and checker costs.
func (a *app) cmdBench(args []string) (int, error) {
	if len(args) == 0 || args[0] != "replay" {
		return 2, usagef("bench: use `deliverysim bench replay [--backend memory|postgres] [--handoff direct|queued] [--events N] [--streams S] [--bots B] [--batch N] [--json]`")
	}
	fs := newFlagSet("bench replay", a.stderr)
	backend := fs.String("backend", "memory", "memory or postgres")
	dsn := fs.String("dsn", "", "Postgres DSN (default: $DELIVERYSIM_PG_DSN)")
	events := fs.Int("events", 100000, "events after the stored cursors, over all streams")
	streams := fs.Int("streams", 4, "streams, each with a stored cursor")
	bots := fs.Int("bots", 1, "bots, each a member of every stream")
	batch := fs.Int("batch", 1000, "events per upstream batch")
	handoff := fs.String("handoff", bench.HandOffDirect, "engine hand-off: direct (no queue row unless an attempt fails; the cursor waits for answers) or queued (a row per delivery)")
	asJSON := fs.Bool("json", false, "print one JSON object")
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
	cfg := bench.ReplayConfig{Backend: c.backend, HandOff: *handoff, DSN: c.dsn, Events: *events, Streams: *streams, Bots: *bots, BatchSize: *batch}
	if *events <= 0 || *streams <= 0 || *bots <= 0 || *batch <= 0 {
		return 2, usagef("bench replay: --events, --streams, --bots and --batch must be positive")
	}
	fmt.Fprintf(a.stderr, "bench replay: %s, %s hand-off, %d events, %d streams, %d bots (filling the store first)...\n", cfg.Backend, cfg.HandOff, cfg.Events, cfg.Streams, cfg.Bots)
	res, err := bench.Replay(a.ctx, cfg)
	if err != nil {
		// Replay's store and baseline already describe a server that cannot
		// be reached (pgstore.DescribeConnError) in one line.
		return 2, &envError{err: err}
	}
	if *asJSON {
		return 0, writeJSON(a.stdout, res)
	}
	fmt.Fprintln(a.stdout, res.Summary())
	return 0, nil
}

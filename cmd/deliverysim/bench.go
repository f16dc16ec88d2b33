package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/deliverysim/deliverysim/bench"
	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// cmdBench dispatches `deliverysim bench <what>`; only replay exists. The
// Go benchmarks (make bench) cover the simulator and checker costs.
func (a *app) cmdBench(args []string) (int, error) {
	if len(args) == 0 || args[0] != "replay" {
		return 2, usagef("bench: use `deliverysim bench replay [--backend memory|postgres] [--events N] [--streams S] [--bots B] [--json]`")
	}
	fs := newFlagSet("bench replay", a.stderr)
	backend := fs.String("backend", "memory", "memory or postgres")
	dsn := fs.String("dsn", "", "Postgres DSN (default: $DELIVERYSIM_PG_DSN)")
	events := fs.Int("events", 100000, "events after the stored cursors, over all streams")
	streams := fs.Int("streams", 4, "streams, each with a stored cursor")
	bots := fs.Int("bots", 1, "bots, each a member of every stream")
	batch := fs.Int("batch", 1000, "events per upstream batch")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := a.parse(fs, args[1:]); err != nil {
		return 2, err
	}
	cfg := bench.ReplayConfig{Events: *events, Streams: *streams, Bots: *bots, BatchSize: *batch}
	switch *backend {
	case "memory":
		cfg.Backend = bench.BackendMemory
	case "postgres", "pg":
		cfg.Backend = bench.BackendPostgres
		cfg.DSN = *dsn
		if cfg.DSN == "" {
			cfg.DSN = a.getenv("DELIVERYSIM_PG_DSN")
		}
		if cfg.DSN == "" {
			return 2, usagef("bench replay: --backend postgres needs a server: pass --dsn or set DELIVERYSIM_PG_DSN (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
		}
	default:
		return 2, usagef("bench replay: --backend %q is not a backend; use memory or postgres", *backend)
	}
	if *events <= 0 || *streams <= 0 || *bots <= 0 || *batch <= 0 {
		return 2, usagef("bench replay: --events, --streams, --bots and --batch must be positive")
	}
	fmt.Fprintf(a.stderr, "bench replay: %s, %d events, %d streams, %d bots (filling the store first)...\n", cfg.Backend, cfg.Events, cfg.Streams, cfg.Bots)
	res, err := bench.Replay(a.ctx, cfg)
	if err != nil {
		if cfg.Backend == bench.BackendPostgres && looksLikeConnError(err) {
			return 2, &envError{err: pgstore.DescribeConnError(cfg.DSN, err)}
		}
		return 2, &envError{err: err}
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(res)
	}
	fmt.Fprintln(a.stdout, res.Summary())
	return 0, nil
}

func looksLikeConnError(err error) bool {
	s := err.Error()
	for _, k := range []string{"connect", "dial", "refused", "no such host", "SQLSTATE 28", "SQLSTATE 3D"} {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}

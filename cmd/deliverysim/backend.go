package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/sim"
)

var schemaSeq atomic.Uint64

// pgRun is a store in a schema of its own: closing it drops the schema, so
// every run starts empty and leaves nothing behind.
type pgRun struct {
	*pgstore.Store
	a      *app
	dsn    string
	schema string
}

func (p *pgRun) Close() error {
	_ = p.Store.Close()
	return pgstore.DropSchema(p.a.ctx, p.dsn, p.schema)
}

func schemaName(seed uint64) string {
	var r [3]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("dsim_%d_%d_%d_%s", seed, os.Getpid(), schemaSeq.Add(1), hex.EncodeToString(r[:]))
}

// storeFactory returns the sim's store constructor for the backend.
func (a *app) storeFactory(c *common, seed uint64) func() (impl.Store, error) {
	if c.backend != "postgres" {
		return nil // sim's default: memstore
	}
	return func() (impl.Store, error) {
		schema := schemaName(seed)
		ctx, cancel := context.WithTimeout(a.ctx, time.Minute)
		defer cancel()
		a.log.Debug("opening postgres schema", "seed", seed, "schema", schema)
		s, err := pgstore.Open(ctx, c.dsn, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 2})
		if err != nil {
			_ = pgstore.DropSchema(a.ctx, c.dsn, schema)
			return nil, &envError{err: pgstore.DescribeConnError(c.dsn, err)}
		}
		return &pgRun{Store: s, a: a, dsn: c.dsn, schema: schema}, nil
	}
}

// checkBackend fails fast, with one line, when the backend is unreachable.
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
	return conn.Close(ctx)
}

// simulate runs one seed with the invocation's settings.
func (a *app) simulate(c *common, seed uint64) (*sim.Result, error) {
	cfg := sim.Config{Seed: seed, Bugs: c.bugs, Plan: c.plan, Store: a.storeFactory(c, seed)}
	start := time.Now()
	r, err := sim.Run(cfg)
	if err != nil {
		return nil, err
	}
	a.log.Debug("simulated", "seed", seed, "backend", c.backend, "elapsed", time.Since(start),
		"trace_lines", len(r.Trace), "violations", len(r.Violations))
	return r, nil
}

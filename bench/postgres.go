package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgschema"
)

// baselineTable is created beside the store's tables with the exact shape
// of messages (columns, primary key, indexes), so the baseline writes the
// same rows into the same kind of table the engine's queue writes them to.
const baselineTable = "bench_baseline"

func replayPostgres(ctx context.Context, cfg ReplayConfig, data *dataset, res *ReplayResult) (err error) {
	schema := cfg.Schema
	if schema == "" {
		schema = uniqueSchema()
		defer func() {
			if dropErr := pgstore.DropSchema(context.WithoutCancel(ctx), cfg.DSN, schema); dropErr != nil && err == nil {
				err = dropErr
			}
		}()
	}
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := pgstore.Open(openCtx, cfg.DSN, pgstore.Options{Schema: schema, Migrate: true, MaxConns: 4, ApplicationName: "deliverysim-bench"})
	if err != nil {
		return err
	}
	defer store.Close()
	if cfg.SkipBaseline {
		return measure(ctx, cfg, store, data, res)
	}
	res.Baseline = "postgres-copy-in+read-out"
	copySecs, readSecs, err := pgBaseline(ctx, cfg.DSN, schema, data)
	if err != nil {
		return err
	}
	if err := measure(ctx, cfg, store, data, res); err != nil {
		return err
	}
	// On a shared machine one COPY can be slowed down several-fold by
	// whatever else runs, so the baseline runs again after the replay and
	// the faster of each half counts: the noise can only count against
	// the engine.
	copy2, read2, err := pgBaseline(ctx, cfg.DSN, schema, data)
	if err != nil {
		return err
	}
	res.CopyInSeconds, res.ReadOutSeconds = min(copySecs, copy2), min(readSecs, read2)
	res.BaselineSeconds = res.CopyInSeconds + res.ReadOutSeconds
	res.setRatios(data.total)
	return nil
}

func uniqueSchema() string { return pgschema.Name(pgschema.KindBench, "", time.Now()) }

// pgBaseline is the fastest raw way to move the replay's rows through the
// same database: one COPY of every (bot, event) message row into a table
// shaped like messages, then one streaming SELECT reading them all back.
// It returns the seconds each half took; the table is dropped afterwards.
func pgBaseline(ctx context.Context, dsn, schema string, data *dataset) (copySecs, readSecs float64, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, 0, pgstore.DescribeConnError(dsn, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	table := pgx.Identifier{schema, baselineTable}
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table.Sanitize()+" (LIKE "+pgx.Identifier{schema, "messages"}.Sanitize()+" INCLUDING ALL)"); err != nil {
		return 0, 0, fmt.Errorf("bench: create the baseline table: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table.Sanitize())
	}()

	rows := newRowSource(data, impl.NanosOf(dataEpoch.Add(24*time.Hour)))
	runtime.GC()
	start := time.Now()
	n, err := conn.CopyFrom(ctx, table, []string{"subscriber", "event_id", "stream", "pos_major", "pos_minor", "pos_id", "payload", "created_at", "next_attempt_at"}, rows)
	copySecs = time.Since(start).Seconds()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: baseline COPY: %w", err)
	}
	want := int64(data.total * len(data.bots))
	if n != want {
		return 0, 0, fmt.Errorf("bench: baseline COPY wrote %d rows, want %d", n, want)
	}

	start = time.Now()
	got, err := readAll(ctx, conn, table)
	readSecs = time.Since(start).Seconds()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: baseline read-out: %w", err)
	}
	if got != want {
		return 0, 0, fmt.Errorf("bench: baseline read-out returned %d rows, want %d", got, want)
	}
	return copySecs, readSecs, nil
}

// readAll streams every row out, decoding each column as the store's
// queue reads do.
func readAll(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) (int64, error) {
	rows, err := conn.Query(ctx, "SELECT subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at FROM "+table.Sanitize())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		n                              int64
		sub, ev, st, pid               string
		major, minor, created, nextAtt int64
		payload                        []byte
	)
	for rows.Next() {
		if err := rows.Scan(&sub, &ev, &st, &major, &minor, &pid, &payload, &created, &nextAtt); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// rowSource feeds COPY the message rows Enqueue would insert, event by
// event and bot by bot, reusing one values slice (pgx encodes each row
// before asking for the next).
type rowSource struct {
	data    *dataset
	created int64
	s, e, b int
	started bool
	ev      engine.Event
	vals    []any
}

func newRowSource(data *dataset, created int64) *rowSource {
	return &rowSource{data: data, created: created, vals: make([]any, 9)}
}

func (r *rowSource) Next() bool {
	if len(r.data.bots) == 0 {
		return false
	}
	if !r.started {
		r.started = true
	} else if r.b++; r.b == len(r.data.bots) {
		r.b = 0
		r.e++
	}
	for r.s < len(r.data.streams) && r.e >= r.data.streams[r.s].n {
		r.s++
		r.e = 0
	}
	if r.s == len(r.data.streams) {
		return false
	}
	if r.b == 0 {
		r.ev = r.data.streams[r.s].event(r.e)
	}
	return true
}

func (r *rowSource) Values() ([]any, error) {
	ev := &r.ev
	r.vals[0], r.vals[1], r.vals[2] = r.data.bots[r.b].ID, ev.ID, ev.Stream
	r.vals[3], r.vals[4], r.vals[5] = ev.Pos.Major, ev.Pos.Minor, ev.Pos.ID
	r.vals[6], r.vals[7], r.vals[8] = ev.Payload, r.created, r.created
	return r.vals, nil
}

func (r *rowSource) Err() error { return nil }

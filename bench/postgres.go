package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
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
	first, err := pgBaseline(ctx, cfg.DSN, schema, data, cfg.BatchSize)
	if err != nil {
		return err
	}
	if err := measure(ctx, cfg, store, data, res); err != nil {
		return err
	}
	// On a shared machine one COPY can be slowed down several-fold by
	// whatever else runs, so the baselines run again after the replay and
	// the faster run of each part counts: the noise can only count against
	// the engine.
	second, err := pgBaseline(ctx, cfg.DSN, schema, data, cfg.BatchSize)
	if err != nil {
		return err
	}
	t := first.faster(second)
	res.CopyInSeconds, res.ReadOutSeconds, res.BatchedCopyInSeconds = t.copy, t.read, t.batched
	res.BaselineSeconds = res.CopyInSeconds + res.ReadOutSeconds
	res.setRatios(data.total)
	return nil
}

func uniqueSchema() string { return pgschema.Name(pgschema.KindBench, "", time.Now()) }

// pgBaseline is the fastest raw way to move the replay's rows through the
// same database: one COPY of every (bot, event) message row into a table
// shaped like messages, then one streaming SELECT reading them all back.
// Beside it, the same rows COPYed again into an empty table of that shape
// the way a queue that makes each upstream batch durable before its sends
// must write them: one COPY and one COMMIT per batch of batch events, in
// the replay's order (streams in turn). It returns the seconds each took;
// the tables are dropped afterwards.
func pgBaseline(ctx context.Context, dsn, schema string, data *dataset, batch int) (b pgTimes, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return b, pgstore.DescribeConnError(dsn, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	table := pgx.Identifier{schema, baselineTable}
	drop := func() error {
		_, err := conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table.Sanitize())
		return err
	}
	create := func() error {
		if _, err := conn.Exec(ctx, "CREATE TABLE "+table.Sanitize()+" (LIKE "+pgx.Identifier{schema, "messages"}.Sanitize()+" INCLUDING ALL)"); err != nil {
			return fmt.Errorf("bench: create the baseline table: %w", err)
		}
		return nil
	}
	if err := create(); err != nil {
		return b, err
	}
	defer func() { _ = drop() }()
	want := int64(data.total * len(data.bots))
	created := impl.NanosOf(dataEpoch.Add(24 * time.Hour))

	runtime.GC()
	start := time.Now()
	n, err := conn.CopyFrom(ctx, table, baselineCols, newRowSource(data, created, data.wholeStreams()))
	b.copy = time.Since(start).Seconds()
	if err != nil {
		return b, fmt.Errorf("bench: baseline COPY: %w", err)
	}
	if n != want {
		return b, fmt.Errorf("bench: baseline COPY wrote %d rows, want %d", n, want)
	}

	start = time.Now()
	got, err := readAll(ctx, conn, table)
	b.read = time.Since(start).Seconds()
	if err != nil {
		return b, fmt.Errorf("bench: baseline read-out: %w", err)
	}
	if got != want {
		return b, fmt.Errorf("bench: baseline read-out returned %d rows, want %d", got, want)
	}

	if err := drop(); err != nil {
		return b, fmt.Errorf("bench: empty the baseline table: %w", err)
	}
	if err := create(); err != nil {
		return b, err
	}
	b.batched, err = copyBatched(ctx, conn, table, newBatchedRows(data, created, batch), want)
	return b, err
}

// copyBatched COPYs each batch of rows in a transaction of its own and
// returns the seconds taken.
func copyBatched(ctx context.Context, conn *pgx.Conn, table pgx.Identifier, batches []*rowSource, want int64) (float64, error) {
	runtime.GC()
	start := time.Now()
	var n int64
	for _, rows := range batches {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, fmt.Errorf("bench: batched baseline BEGIN: %w", err)
		}
		k, err := tx.CopyFrom(ctx, table, baselineCols, rows)
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return 0, fmt.Errorf("bench: batched baseline COPY: %w", err)
		}
		n += k
	}
	secs := time.Since(start).Seconds()
	if n != want {
		return 0, fmt.Errorf("bench: batched baseline COPY wrote %d rows, want %d", n, want)
	}
	return secs, nil
}

// newBatchedRows is a row source per upstream batch, in the replay's order.
func newBatchedRows(data *dataset, created int64, batch int) []*rowSource {
	spans := data.batches(batch)
	out := make([]*rowSource, len(spans))
	for i, sp := range spans {
		out[i] = newRowSource(data, created, []span{sp})
	}
	return out
}

// pgTimes is one run of the Postgres baselines, in seconds.
type pgTimes struct{ copy, read, batched float64 }

// faster keeps the faster run of each part.
func (t pgTimes) faster(o pgTimes) pgTimes {
	return pgTimes{copy: min(t.copy, o.copy), read: min(t.read, o.read), batched: min(t.batched, o.batched)}
}

// baselineCols are the columns Enqueue fills (the rest take defaults), in
// the order rowSource writes them and readAll scans them.
var baselineCols = []string{"subscriber", "event_id", "stream", "pos_major", "pos_minor", "pos_id", "payload", "created_at", "next_attempt_at"}

// readAll streams every row out, decoding each column as the store's
// queue reads do.
func readAll(ctx context.Context, conn *pgx.Conn, table pgx.Identifier) (int64, error) {
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(baselineCols, ", ")+" FROM "+table.Sanitize())
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

// span is events [from, to) of one stream.
type span struct{ s, from, to int }

// wholeStreams is every event as one span per stream, in stream order.
func (d *dataset) wholeStreams() []span {
	out := make([]span, 0, len(d.streams))
	for s, st := range d.streams {
		out = append(out, span{s: s, from: 0, to: st.n})
	}
	return out
}

// batches is every event in upstream batches of batch events, in the
// order the replay's driver hands them over: one batch from each stream
// in turn.
func (d *dataset) batches(batch int) []span {
	var out []span
	for from := 0; ; from += batch {
		before := len(out)
		for s, st := range d.streams {
			if from < st.n {
				out = append(out, span{s: s, from: from, to: min(from+batch, st.n)})
			}
		}
		if len(out) == before {
			return out
		}
	}
}

// rowSource feeds COPY the message rows Enqueue would insert for the
// events of its spans, event by event and bot by bot, reusing one values
// slice (pgx encodes each row before asking for the next).
type rowSource struct {
	data    *dataset
	created int64
	spans   []span
	e, b    int // the current event of spans[0], and bot
	started bool
	ev      engine.Event
	vals    []any
}

func newRowSource(data *dataset, created int64, spans []span) *rowSource {
	return &rowSource{data: data, created: created, spans: spans, vals: make([]any, len(baselineCols))}
}

func (r *rowSource) Next() bool {
	if len(r.data.bots) == 0 {
		return false
	}
	if !r.started {
		r.started = true
		if len(r.spans) > 0 {
			r.e = r.spans[0].from
		}
	} else if r.b++; r.b == len(r.data.bots) {
		r.b = 0
		r.e++
	}
	for len(r.spans) > 0 && r.e >= r.spans[0].to {
		r.spans = r.spans[1:]
		if len(r.spans) > 0 {
			r.e = r.spans[0].from
		}
	}
	if len(r.spans) == 0 {
		return false
	}
	if r.b == 0 {
		r.ev = r.data.streams[r.spans[0].s].event(r.e)
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

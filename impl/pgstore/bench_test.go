package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

func benchMessages(round, n int) []impl.Message {
	ms := make([]impl.Message, n)
	for i := range ms {
		id := fmt.Sprintf("r%06d-%04d", round, i)
		ms[i] = impl.Message{Subscriber: fmt.Sprintf("bot%d", i%8), EventID: id, Stream: "stream",
			Pos: impl.Position{Major: int64(round), Minor: int64(i)}, Payload: []byte(`{"event":"` + id + `"}`), CreatedAt: t0.Add(time.Duration(round))}
	}
	return ms
}

// BenchmarkEnqueue measures the store's Enqueue against the other ways of
// batching an insert that must skip existing keys: a pgx.Batch of
// single-row inserts, and COPY into a temporary table followed by INSERT
// ... SELECT. "store" is Enqueue as it is: from defaultCopyMinRows (32)
// messages a plain COPY into messages, with the unnest INSERT ... ON
// CONFLICT only if a key is present (never here); "unnest" is that INSERT
// alone, which the store uses below 32. On a 2-core machine the unnest
// INSERT was the fastest way at 1 and 10 messages (2x the batch at 1, level
// at 10) and the direct COPY from about 25 up (at 100 and 1000 messages it
// took 65-80% of the unnest INSERT's time); COPY through a temporary table
// pays for the table and only catches up with unnest near 1000.
func BenchmarkEnqueue(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		for _, path := range []string{"store", "unnest"} {
			b.Run(fmt.Sprintf("%s/n=%d", path, n), func(b *testing.B) {
				s := pgtest.NewStore(b)
				if path == "unnest" {
					s.SetCopyMinRows(n + 1)
				}
				ctx := context.Background()
				for i := 0; b.Loop(); i++ {
					if _, err := s.Enqueue(ctx, benchMessages(i, n)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
		b.Run(fmt.Sprintf("batch/n=%d", n), func(b *testing.B) {
			pool := rawPool(b)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				batch := &pgx.Batch{}
				for _, m := range benchMessages(i, n) {
					batch.Queue(`INSERT INTO messages (subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at)
						VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) ON CONFLICT DO NOTHING`,
						m.Subscriber, m.EventID, m.Stream, m.Pos.Major, m.Pos.Minor, m.Pos.ID, m.Payload, impl.NanosOf(m.CreatedAt))
				}
				if err := pool.SendBatch(ctx, batch).Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run(fmt.Sprintf("copy/n=%d", n), func(b *testing.B) {
			pool := rawPool(b)
			ctx := context.Background()
			cols := []string{"subscriber", "event_id", "stream", "pos_major", "pos_minor", "pos_id", "payload", "created_at"}
			for i := 0; b.Loop(); i++ {
				ms := benchMessages(i, n)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `CREATE TEMP TABLE staging (subscriber text, event_id text, stream text, pos_major bigint,
						pos_minor bigint, pos_id text, payload bytea, created_at bigint) ON COMMIT DROP`); err != nil {
						return err
					}
					_, err := tx.CopyFrom(ctx, pgx.Identifier{"staging"}, cols, pgx.CopyFromSlice(len(ms), func(i int) ([]any, error) {
						m := ms[i]
						return []any{m.Subscriber, m.EventID, m.Stream, m.Pos.Major, m.Pos.Minor, m.Pos.ID, m.Payload, impl.NanosOf(m.CreatedAt)}, nil
					}))
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `INSERT INTO messages (subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, next_attempt_at)
						SELECT subscriber, event_id, stream, pos_major, pos_minor, pos_id, payload, created_at, created_at FROM staging
						ON CONFLICT DO NOTHING`)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// rawPool is a pool on a fresh migrated schema, for statements the store
// does not make.
func rawPool(b *testing.B) *pgxpool.Pool {
	dsn, schema := pgtest.NewSchema(b)
	if err := pgstore.Migrate(context.Background(), dsn, schema); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// BenchmarkAdvanceCursors: distinct keys go as one multi-row upsert, a
// repeated key as a pipelined batch of single-row upserts.
func BenchmarkAdvanceCursors(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		for _, repeated := range []bool{false, n > 1} {
			b.Run(fmt.Sprintf("n=%d/repeated=%v", n, repeated), func(b *testing.B) {
				s := pgtest.NewStore(b)
				ctx := context.Background()
				cs := make([]impl.Cursor, n)
				for i := 0; b.Loop(); i++ {
					for j := range cs {
						cs[j] = impl.Cursor{Key: impl.CursorKey{Stream: fmt.Sprintf("stream-%03d", j)},
							Pos: impl.Position{Major: int64(i), Minor: int64(j)}, Token: []byte("cookie"), UpdatedAt: t0}
					}
					if repeated {
						cs[n-1].Key = cs[0].Key
					}
					if _, err := s.AdvanceCursors(ctx, cs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "cursors/s")
			})
		}
	}
}

// BenchmarkClaimAck is the delivery loop's store traffic: claim a batch of
// due messages, acknowledge them.
func BenchmarkClaimAck(b *testing.B) {
	const batch = 50
	s := pgtest.NewStore(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if _, err := s.Enqueue(ctx, benchMessages(i, batch)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ms, err := s.Claim(ctx, impl.ClaimRequest{Owner: "node", Now: t0.Add(time.Hour), Lease: time.Minute, Limit: batch})
		if err != nil || len(ms) != batch {
			b.Fatalf("claimed %d, %v; want %d", len(ms), err, batch)
		}
		keys := make([]impl.MessageKey, len(ms))
		for j, m := range ms {
			keys[j] = m.Key()
		}
		if n, err := s.Ack(ctx, keys); err != nil || n != batch {
			b.Fatalf("acked %d, %v; want %d", n, err, batch)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkReplayBatch is the store traffic of one upstream batch of the
// replay benchmark's queued hand-off (deliverysim bench replay --handoff
// queued): enqueue 1000 messages already leased to this node, advance the
// stream's cursor, acknowledge the messages. Acknowledged rows stay behind
// as dead tuples until vacuum runs, as in a real replay, so each round
// works on a larger table: compare runs of a fixed -benchtime (200x is the
// replay of 200000 events). Metrics: the milliseconds each call took per
// round.
func BenchmarkReplayBatch(b *testing.B) {
	const batch = 1000
	s := pgtest.NewStore(b)
	ctx := context.Background()
	keys := make([]impl.MessageKey, batch)
	var enqueue, advance, ack time.Duration
	for i := 0; b.Loop(); i++ {
		ms := benchMessages(i, batch)
		for j := range ms {
			ms[j].Subscriber = "bot-000"
			ms[j].LeaseOwner, ms[j].LeaseUntil = "bench", t0.Add(time.Hour)
			keys[j] = ms[j].Key()
		}
		start := time.Now()
		ins, err := s.EnqueueLeased(ctx, ms)
		if err != nil || len(ins) != batch || !ins[0] || !ins[batch-1] {
			b.Fatalf("enqueue leased: %v, %d results", err, len(ins))
		}
		mid := time.Now()
		c := impl.Cursor{Key: impl.CursorKey{Stream: "stream"}, Pos: impl.Position{Major: int64(i + 1)}, Token: []byte("cookie"), UpdatedAt: t0}
		if ok, err := s.AdvanceCursors(ctx, []impl.Cursor{c}); err != nil || !ok[0] {
			b.Fatalf("advance: %v %v", ok, err)
		}
		mid2 := time.Now()
		if n, err := s.Ack(ctx, keys); err != nil || n != batch {
			b.Fatalf("acked %d, %v; want %d", n, err, batch)
		}
		enqueue, advance, ack = enqueue+mid.Sub(start), advance+mid2.Sub(mid), ack+time.Since(mid2)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(enqueue.Seconds()*1e3/float64(b.N), "enqueue-ms/op")
	b.ReportMetric(advance.Seconds()*1e3/float64(b.N), "advance-ms/op")
	b.ReportMetric(ack.Seconds()*1e3/float64(b.N), "ack-ms/op")
}

// BenchmarkReplayHandOff is the queued replay's store traffic as the
// engine sends it (bench replay --handoff queued): one WriteHandOff per
// upstream batch of 1000 leased messages, carrying a cursor and, on every
// other call, the ack of the batch before (the other calls ack nothing and
// leave that batch's rows behind, so half the rows stay: the batches of
// two of the four streams). The two kinds of call alternate, so a loaded
// machine's drift falls on both alike, and the difference of their
// metrics is what the ack's delete adds to a hand-off in the same
// transaction: no-ack-ms/op and ack-ms/op are the mean milliseconds of each
// kind. Streams take turns as in the replay (4 of them, ids increasing
// within each), so the acked batches are dense ranges of the key index.
// On a quiet 2-core machine (PostgreSQL 15, 400 calls, 3 runs): 9.65-9.85
// ack-ms/op against 8.46-8.57 no-ack-ms/op, the delete 1.2-1.3 ms of a
// 1000-row hand-off; carrying acks over two hand-offs (2000 keys every
// other call) cost the same per row, in a harness that alternated both.
func BenchmarkReplayHandOff(b *testing.B) {
	const batch, streams = 1000, 4
	s := pgtest.NewStore(b)
	ctx := context.Background()
	var prev []impl.MessageKey
	var with, without time.Duration
	var nWith, nWithout int
	for i := 0; b.Loop(); i++ {
		st := i % streams
		ms := make([]impl.Message, batch)
		keys := make([]impl.MessageKey, batch)
		for j := range ms {
			id := fmt.Sprintf("s%03d-e%09d", st, (i/streams)*batch+j)
			ms[j] = impl.Message{Subscriber: "bot-000", EventID: id, Stream: fmt.Sprintf("stream-%03d", st),
				Pos: impl.Position{Major: int64(i*batch + j)}, Payload: make([]byte, 64), CreatedAt: t0.Add(time.Duration(i)),
				LeaseOwner: "bench", LeaseUntil: t0.Add(time.Hour)}
			keys[j] = ms[j].Key()
		}
		w := impl.HandOffWrite{Enqueue: ms, Cursors: []impl.Cursor{{Key: impl.CursorKey{Stream: ms[0].Stream},
			Pos: ms[batch-1].Pos, Token: []byte("cookie"), UpdatedAt: t0}}}
		acking := i%2 == 1
		if acking {
			w.Ack = prev
		}
		start := time.Now()
		res, err := s.WriteHandOff(ctx, w)
		took := time.Since(start)
		if err != nil || res.Acked != len(w.Ack) || !res.Inserted[0] || !res.Inserted[batch-1] {
			b.Fatalf("hand-off %d: %v; acked %d of %d", i, err, res.Acked, len(w.Ack))
		}
		if acking {
			with, nWith = with+took, nWith+1
		} else {
			without, nWithout = without+took, nWithout+1
		}
		prev = keys
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
	if nWith > 0 && nWithout > 0 {
		b.ReportMetric(with.Seconds()*1e3/float64(nWith), "ack-ms/op")
		b.ReportMetric(without.Seconds()*1e3/float64(nWithout), "no-ack-ms/op")
	}
}

package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Replay refuses to report a run that lost or duplicated anything (it
// checks the counters, the queue and every cursor afterwards), so a
// successful Replay here is itself the assertion that the engine delivered
// each (bot, event) pair exactly once and moved every cursor to its end.
func TestReplayMemory(t *testing.T) {
	var cases []ReplayConfig
	for _, h := range []string{HandOffDirect, HandOffQueued} {
		for _, c := range []ReplayConfig{
			{Events: 5000, Streams: 3, Bots: 2},
			{Events: 5000, Streams: 3, Bots: 2, SeparateWrites: true},
			{Events: 3001, Streams: 2, Bots: 1, MaxInFlight: 8, SingleResults: true, BatchSize: 250},
			{Events: 2000, Streams: 4, Bots: 3, AsyncCursors: true},
			{Events: 1000, Streams: 1, Bots: 1, BatchSize: 7, MaxInFlight: 3},
		} {
			c.HandOff = h
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("handoff=%s/events=%d/streams=%d/bots=%d/inflight=%d/separate=%v", c.HandOff, c.Events, c.Streams, c.Bots, c.MaxInFlight, c.SeparateWrites), func(t *testing.T) {
			res, err := Replay(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if res.Deliveries != c.Events*c.Bots {
				t.Fatalf("deliveries = %d, want %d", res.Deliveries, c.Events*c.Bots)
			}
			if res.EventsPerSecond <= 0 || res.BaselineEventsPerSecond <= 0 || res.Ratio <= 0 {
				t.Fatalf("rates missing: %+v", res)
			}
			if res.StoreCalls.AdvanceCursors == 0 {
				t.Fatalf("the timed part wrote no cursor: %+v", res.StoreCalls)
			}
			// Queued: every delivery is a row written and deleted. Direct:
			// rows only for what a bot could not take at once (more than
			// its free request slots), and none when it can take a batch.
			queuedRows := c.HandOff == HandOffQueued || c.MaxInFlight > 0 && c.MaxInFlight < max(c.BatchSize, 1000)
			if got := res.StoreCalls.Enqueue > 0 && res.StoreCalls.Ack > 0; got != queuedRows {
				t.Fatalf("handoff %s, in-flight %d: enqueue and ack calls %+v; want rows written: %v", c.HandOff, c.MaxInFlight, res.StoreCalls, queuedRows)
			}
			// The queued hand-off with sync cursors writes acks and
			// cursors with the next batch's insert unless told not to.
			coalesced := c.HandOff == HandOffQueued && !c.AsyncCursors && !c.SeparateWrites
			if got := res.StoreCalls.HandOff > 0; got != coalesced {
				t.Fatalf("hand-off writes %+v; want some: %v", res.StoreCalls, coalesced)
			}
		})
	}
}

func TestReplayRejectsBadConfig(t *testing.T) {
	for _, c := range []ReplayConfig{
		{Backend: "mysql"},
		{Events: 3, Streams: 5},
		{Events: -1},
		{Backend: BackendPostgres, Events: 10},
		{HandOff: "sideways"},
	} {
		if _, err := Replay(context.Background(), c); err == nil {
			t.Errorf("Replay(%+v) succeeded; want an error", c)
		}
	}
}

func TestReplayPostgres(t *testing.T) {
	for _, h := range []string{HandOffDirect, HandOffQueued} {
		t.Run("handoff="+h, func(t *testing.T) {
			dsn, schema := pgtest.NewSchema(t)
			res, err := Replay(context.Background(), ReplayConfig{Backend: BackendPostgres, HandOff: h, DSN: dsn, Schema: schema, Events: 3000, Streams: 2, Bots: 2})
			if err != nil {
				t.Fatal(err)
			}
			if res.CopyInSeconds <= 0 || res.ReadOutSeconds <= 0 || res.Ratio <= 0 || res.RatioToCopyIn <= 0 ||
				res.BatchedCopyInSeconds <= 0 || res.RatioToBatchedCopyIn <= 0 {
				t.Fatalf("baseline missing: %+v", res)
			}
			if res.Baseline != "postgres-copy-in+read-out" || res.HandOff != h {
				t.Fatalf("baseline = %q, handoff = %q", res.Baseline, res.HandOff)
			}
		})
	}
}

// TestBaselineRowsInReplayOrder: the batched baseline must write exactly the
// rows the bulk one does, each (event, bot) once, one upstream batch of each
// stream in turn as the driver hands them over.
func TestBaselineRowsInReplayOrder(t *testing.T) {
	data := genData(context.Background(), 23, 3, 2, 8, 1) // streams of 8, 8 and 7 events
	rows := func(spans []span) []string {
		var out []string
		r := newRowSource(&data, 5, spans)
		for r.Next() {
			v, _ := r.Values()
			out = append(out, v[0].(string)+"/"+v[1].(string))
		}
		return out
	}
	bulk := rows(data.wholeStreams())
	if len(bulk) != 23*2 {
		t.Fatalf("bulk baseline: %d rows, want %d", len(bulk), 23*2)
	}
	spans := data.batches(3)
	want := []span{{0, 0, 3}, {1, 0, 3}, {2, 0, 3}, {0, 3, 6}, {1, 3, 6}, {2, 3, 6}, {0, 6, 8}, {1, 6, 8}, {2, 6, 7}}
	if !slices.Equal(spans, want) {
		t.Fatalf("batches(3) = %v, want %v", spans, want)
	}
	var batched []string
	for _, sp := range spans {
		batched = append(batched, rows([]span{sp})...)
	}
	if got := rows(spans); !slices.Equal(got, batched) {
		t.Fatalf("one source over every span differs from one per span:\n%v\n%v", got, batched)
	}
	slices.Sort(bulk)
	slices.Sort(batched)
	if !slices.Equal(bulk, batched) {
		t.Fatalf("batched rows differ from the bulk ones:\n%v\n%v", batched, bulk)
	}
	if got := slices.Compact(slices.Clone(bulk)); len(got) != len(bulk) {
		t.Fatalf("a row is written twice: %v", bulk)
	}
}

// replaySizes is the sweep: events at a fixed shape, then streams and bots
// at a fixed event count, so the report shows how the cost grows with each.
// Both hand-offs run the events sweep; the streams and bots sweeps run the
// default (direct) one.
var replaySizes = []struct {
	backend, handoff      string
	events, streams, bots int
	long                  bool // skipped under -short
}{
	{BackendMemory, HandOffDirect, 10000, 4, 1, false},
	{BackendMemory, HandOffDirect, 100000, 4, 1, false},
	{BackendMemory, HandOffDirect, 1000000, 4, 1, true},
	{BackendMemory, HandOffDirect, 100000, 1, 1, false},
	{BackendMemory, HandOffDirect, 100000, 16, 1, false},
	{BackendMemory, HandOffDirect, 100000, 4, 4, false},
	{BackendMemory, HandOffDirect, 100000, 4, 16, true},
	{BackendMemory, HandOffQueued, 10000, 4, 1, false},
	{BackendMemory, HandOffQueued, 100000, 4, 1, false},
	{BackendMemory, HandOffQueued, 1000000, 4, 1, true},
	{BackendPostgres, HandOffDirect, 10000, 4, 1, false},
	{BackendPostgres, HandOffDirect, 50000, 4, 1, false},
	{BackendPostgres, HandOffDirect, 200000, 4, 1, true},
	{BackendPostgres, HandOffDirect, 50000, 1, 1, false},
	{BackendPostgres, HandOffDirect, 50000, 16, 1, false},
	{BackendPostgres, HandOffDirect, 50000, 4, 4, true},
	{BackendPostgres, HandOffQueued, 10000, 4, 1, false},
	{BackendPostgres, HandOffQueued, 50000, 4, 1, false},
	{BackendPostgres, HandOffQueued, 200000, 4, 1, true},
}

// BenchmarkReplay runs Replay over the size sweep. ns/op is the replay
// alone (restart to last acknowledgement); data generation, schema setup
// and the baseline are outside it. Metrics: events/s, the baseline's
// events/s and the ratio of the two; deliveries/s counts (bot, event)
// pairs; for Postgres also the ratios to the COPY-in half of the baseline
// and to the same rows COPYed a batch per commit.
// Sizes are large: run with -benchtime=1x (and -count for repeats).
func BenchmarkReplay(b *testing.B) {
	for _, sz := range replaySizes {
		name := fmt.Sprintf("backend=%s/handoff=%s/events=%d/streams=%d/bots=%d", sz.backend, sz.handoff, sz.events, sz.streams, sz.bots)
		b.Run(name, func(b *testing.B) {
			if sz.long && testing.Short() {
				b.Skip("large size; skipped under -short")
			}
			var secs, baseSecs, copySecs, batchedSecs float64
			var events, deliveries int
			for range b.N {
				cfg := ReplayConfig{Backend: sz.backend, HandOff: sz.handoff, Events: sz.events, Streams: sz.streams, Bots: sz.bots}
				if sz.backend == BackendPostgres {
					b.StopTimer()
					cfg.DSN, cfg.Schema = pgtest.NewSchema(b)
					b.StartTimer()
				}
				res, err := Replay(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				secs += res.Seconds
				baseSecs += res.BaselineSeconds
				copySecs += res.CopyInSeconds
				batchedSecs += res.BatchedCopyInSeconds
				events += res.Events
				deliveries += res.Deliveries
			}
			b.ReportMetric(secs*1e9/float64(b.N), "ns/op")
			rate := float64(events) / secs
			b.ReportMetric(rate, "events/s")
			b.ReportMetric(float64(deliveries)/secs, "deliveries/s")
			base := float64(events) / baseSecs
			b.ReportMetric(base, "baseline-events/s")
			b.ReportMetric(rate/base, "ratio")
			if copySecs > 0 {
				b.ReportMetric(rate/(float64(events)/copySecs), "ratio-to-copy-in")
			}
			if batchedSecs > 0 {
				b.ReportMetric(rate/(float64(events)/batchedSecs), "ratio-to-batched-copy-in")
			}
		})
	}
}

// lossyStore accepts every enqueue and keeps nothing: what a broken
// backend or engine looks like from the driver.
type lossyStore struct{ impl.Store }

func (lossyStore) Enqueue(_ context.Context, msgs []impl.Message) (int, error) { return len(msgs), nil }

// The driver notices lost deliveries instead of reporting a rate for them.
func TestReplayDetectsLoss(t *testing.T) {
	cfg := ReplayConfig{Events: 500, Streams: 2, Bots: 1, SkipBaseline: true}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	data := genData(context.Background(), cfg.Events, cfg.Streams, cfg.Bots, cfg.PayloadBytes, 1)
	var res ReplayResult
	err := measure(context.Background(), cfg, lossyStore{memstore.New()}, &data, &res)
	if err == nil || !strings.Contains(err.Error(), "acknowledged") {
		t.Fatalf("measure on a store that loses messages returned %v; want a lost-delivery error", err)
	}
}

// The floor must compute the very header the engine sends, or it is not
// the work a delivery engine cannot skip.
func TestSigningFloorSignsAsTheEngine(t *testing.T) {
	data := genData(context.Background(), 50, 2, 3, 64, 7)
	for _, bot := range data.bots {
		fs := newFloorSigner(bot.Secret)
		for s := range data.streams {
			for i := range data.streams[s].n {
				ev := data.streams[s].event(i)
				got := string(fs.sign(ev.ID, 1767312000, ev.Payload))
				if want := webhook.Sign(bot.Secret, ev.ID, 1767312000, ev.Payload); got != want {
					t.Fatalf("floor signature %q, engine (webhook.Sign) %q", got, want)
				}
			}
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// stepClock is the replay's virtual clock: it moves one microsecond per
// input, so every Step sees a later instant (queue order then follows
// hand-off order) and nothing depends on the wall clock.
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

// driver is a minimal single-threaded runtime for the engine: an upstream
// that replays the generated streams after whatever position the engine
// subscribes from, bots that answer every request with a 2xx at once, and
// async cursor writes performed right away.
type driver struct {
	ctx   context.Context
	store impl.Store
	eng   *engine.Engine
	clk   *stepClock
	data  *dataset
	batch int
	bulk  bool // answer a Ready's sends with one WebhookResults input

	feeds []*feed // per stream, in data order
	byID  map[string]*feed

	evs            []engine.Event // the upstream batch being handed over, reused
	results, spare []engine.WebhookResult
	writesDone     []engine.CursorWriteDone
	timers         []engine.Timer // asked for and not fired yet
	ackDelay       time.Duration  // the engine's AckDelay: how far ahead a timer may be fired

	owed, acked int
	steps       int
	err         error
}

// feed is one stream's subscription: the next event the upstream hands out.
type feed struct {
	s          *stream
	next       int
	subscribed bool
}

func newDriver(ctx context.Context, store impl.Store, d *dataset, cfg engine.Config, batch int, bulk bool) (*driver, error) {
	clk := &stepClock{t: dataEpoch.Add(24 * time.Hour)}
	cfg.Clock = clk
	cfg.Rand = rand.New(rand.NewPCG(1, 2))
	eng, err := engine.New(cfg, store)
	if err != nil {
		return nil, err
	}
	dr := &driver{ctx: ctx, store: store, eng: eng, clk: clk, data: d, batch: batch, bulk: bulk, ackDelay: cfg.AckDelay,
		byID: map[string]*feed{}, owed: d.total * len(d.bots)}
	for i := range d.streams {
		f := &feed{s: &d.streams[i]}
		dr.feeds = append(dr.feeds, f)
		dr.byID[f.s.id] = f
	}
	return dr, nil
}

// run boots the engine and drives it until every owed (bot, event) pair is
// acknowledged. Webhook results and cursor completions go in before the
// next upstream batch, as a runtime with fast bots would see them, so the
// queue stays short and the measurement is of steady-state hand-off.
func (dr *driver) run(reg engine.Registry) error {
	dr.step(engine.Start{Registry: reg})
	next := 0
	for dr.err == nil && dr.acked < dr.owed {
		if err := dr.ctx.Err(); err != nil {
			return err
		}
		switch {
		case len(dr.results) > 0:
			rs := dr.results
			dr.results = dr.spare[:0]
			if dr.bulk {
				dr.step(engine.WebhookResults{Results: rs})
			} else {
				for _, r := range rs {
					dr.step(r)
				}
			}
			dr.spare = rs[:0]
		case len(dr.writesDone) > 0:
			ws := dr.writesDone
			dr.writesDone = nil
			for _, w := range ws {
				dr.step(w)
			}
		default:
			f := dr.nextFeed(&next)
			if f == nil && dr.fireWithin(dr.ackDelay) {
				// The upstream is done and what is left waited on a
				// timer (the last batch's deferred acks).
				continue
			}
			if f == nil {
				return fmt.Errorf("bench: the upstream is exhausted but only %d of %d (bot, event) deliveries were acknowledged; the engine lost some", dr.acked, dr.owed)
			}
			end := min(f.next+dr.batch, f.s.n)
			dr.evs = f.s.fill(dr.evs, f.next, end)
			f.next = end
			dr.step(engine.UpstreamBatch{Stream: f.s.id, Kind: engine.LogStream, Events: dr.evs, Cookie: cookie(dr.evs[len(dr.evs)-1].Pos.Major)})
		}
	}
	// Every delivery is acknowledged; a cursor write the engine deferred
	// (Config.AckDelay) is part of the replay too.
	for dr.err == nil && dr.fireWithin(dr.ackDelay) {
	}
	return dr.err
}

// fireWithin fires the earliest timer asked for if it is due within d,
// moving the clock to it, and says whether it did. Later timers (the
// engine's maintenance, store retries) are not the replay's business.
func (dr *driver) fireWithin(d time.Duration) bool {
	if len(dr.timers) == 0 {
		return false
	}
	k := 0
	for i, t := range dr.timers {
		if t.At.Before(dr.timers[k].At) {
			k = i
		}
	}
	t := dr.timers[k]
	if t.At.After(dr.clk.t.Add(d)) {
		return false
	}
	dr.timers = append(dr.timers[:k], dr.timers[k+1:]...)
	if t.At.After(dr.clk.t) {
		dr.clk.t = t.At.Add(-time.Microsecond) // step adds it back
	}
	dr.step(engine.TimerFired{TimerID: t.ID})
	return true
}

// nextFeed picks streams round-robin, skipping exhausted ones.
func (dr *driver) nextFeed(next *int) *feed {
	for range dr.feeds {
		f := dr.feeds[*next%len(dr.feeds)]
		*next++
		if f.subscribed && f.next < f.s.n {
			return f
		}
	}
	return nil
}

func (dr *driver) step(in engine.Input) {
	dr.clk.t = dr.clk.t.Add(time.Microsecond)
	dr.steps++
	if err := dr.eng.Step(in); err != nil {
		dr.err = fmt.Errorf("bench: engine step %T: %w", in, err)
		return
	}
	r := dr.eng.Ready()
	dr.apply(r)
	dr.eng.Recycle(r)
}

func (dr *driver) apply(r engine.Ready) {
	for _, n := range r.Notes {
		if n.Kind == "store-error" {
			// The engine would retry on a timer; a benchmark that hits a
			// store error measures the error path, so stop instead.
			dr.err = fmt.Errorf("bench: store error during replay: %s", n.Detail)
			return
		}
	}
	dr.acked = dr.eng.Counters().Acked
	for _, sub := range r.Subscribes {
		f := dr.byID[sub.Stream]
		if f == nil || sub.Fresh {
			continue // nothing to replay
		}
		f.subscribed = true
		f.next = f.s.after(sub.From)
	}
	dr.timers = append(dr.timers, r.Timers...)
	for _, sd := range r.Sends {
		dr.results = append(dr.results, engine.WebhookResult{RequestID: sd.RequestID, Outcome: engine.OutcomeOK, Status: 200})
	}
	for _, cw := range r.CursorWrites {
		_, err := dr.store.AdvanceCursors(dr.ctx, []impl.Cursor{cw.Cursor})
		dr.writesDone = append(dr.writesDone, engine.CursorWriteDone{WriteID: cw.WriteID, Err: err})
	}
}

// verify checks, after the clock stopped, that the replay did what a
// replay must: each owed pair sent once and acknowledged, the queue empty,
// and every stream's cursor at its last event.
func (dr *driver) verify() error {
	c := dr.eng.Counters()
	// Each pair is handed off once: queued (a row) or sent directly (none).
	if c.Enqueued+c.SentDirect != dr.owed || c.Sent != dr.owed || c.Acked != dr.owed {
		return fmt.Errorf("bench: expected %d (bot, event) pairs handed off, sent and acknowledged once each, got enqueued=%d sent-direct=%d sent=%d acked=%d",
			dr.owed, c.Enqueued, c.SentDirect, c.Sent, c.Acked)
	}
	left, err := dr.store.ListMessages(dr.ctx, "")
	if err != nil {
		return fmt.Errorf("bench: list messages after replay: %w", err)
	}
	if len(left) != 0 {
		return fmt.Errorf("bench: %d messages still queued after every delivery was acknowledged", len(left))
	}
	for _, f := range dr.feeds {
		if f.s.n == 0 {
			continue
		}
		cur, ok, err := dr.store.GetCursor(dr.ctx, impl.CursorKey{Stream: f.s.id})
		if err != nil {
			return fmt.Errorf("bench: read cursor of %s: %w", f.s.id, err)
		}
		want := f.s.last()
		if !ok || cur.Pos != want {
			return fmt.Errorf("bench: cursor of %s is %+v (stored=%v) after replay, want %+v", f.s.id, cur.Pos, ok, want)
		}
	}
	return nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

var errInjected = errors.New("injected store failure")

// flaky wraps a store and fails chosen methods a chosen number of times.
type flaky struct {
	impl.Store
	failNext map[string]int
}

func (f *flaky) check(op string) error {
	if n := f.failNext[op]; n > 0 {
		f.failNext[op] = n - 1
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	return nil
}

func (f *flaky) ListCursors(ctx context.Context) ([]impl.Cursor, error) {
	if err := f.check("ListCursors"); err != nil {
		return nil, err
	}
	return f.Store.ListCursors(ctx)
}

func (f *flaky) AdvanceCursors(ctx context.Context, cs []impl.Cursor) ([]bool, error) {
	if err := f.check("AdvanceCursors"); err != nil {
		return nil, err
	}
	return f.Store.AdvanceCursors(ctx, cs)
}

func (f *flaky) Enqueue(ctx context.Context, msgs []impl.Message) (int, error) {
	if err := f.check("Enqueue"); err != nil {
		return 0, err
	}
	return f.Store.Enqueue(ctx, msgs)
}

func (f *flaky) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	if err := f.check("Claim"); err != nil {
		return nil, err
	}
	return f.Store.Claim(ctx, req)
}

func (f *flaky) Ack(ctx context.Context, keys []impl.MessageKey) (int, error) {
	if err := f.check("Ack"); err != nil {
		return 0, err
	}
	return f.Store.Ack(ctx, keys)
}

func (f *flaky) Fail(ctx context.Context, req impl.FailRequest) (impl.Message, bool, error) {
	if err := f.check("Fail"); err != nil {
		return impl.Message{}, false, err
	}
	return f.Store.Fail(ctx, req)
}

func (f *flaky) ListMessages(ctx context.Context, sub string) ([]impl.Message, error) {
	if err := f.check("ListMessages"); err != nil {
		return nil, err
	}
	return f.Store.ListMessages(ctx, sub)
}

func (f *flaky) GetDelivered(ctx context.Context, app, source string) ([]impl.DeliveredItem, error) {
	if err := f.check("GetDelivered"); err != nil {
		return nil, err
	}
	return f.Store.GetDelivered(ctx, app, source)
}

func (f *flaky) RecordDelivered(ctx context.Context, app, source string, items []impl.DeliveredItem, deleted []string) error {
	if err := f.check("RecordDelivered"); err != nil {
		return err
	}
	return f.Store.RecordDelivered(ctx, app, source, items, deleted)
}

// rig drives one engine (and its successors after a crash) over one store,
// collecting every effect.
type rig struct {
	t     testing.TB
	clk   *fakeClock
	mem   *memstore.Store
	st    *flaky
	store impl.Store // what the engine is given: st, or a wrapper of it
	cfg   Config
	eng   *Engine
	reg   Registry
	crash map[CrashPoint]bool // crash at the next occurrence of these

	readies []Ready
	sends   []Send
	subs    []Subscribe
	notes   []Note
	writes  []CursorWrite
	timers  map[uint64]time.Time
}

func newRig(t testing.TB, mutate func(*Config)) *rig {
	t.Helper()
	r := &rig{t: t, clk: &fakeClock{t: t0}, mem: memstore.New(), crash: map[CrashPoint]bool{}, timers: map[uint64]time.Time{}}
	r.st = &flaky{Store: r.mem, failNext: map[string]int{}}
	r.cfg = DefaultConfig()
	r.cfg.Clock = r.clk
	r.cfg.Rand = rand.New(rand.NewPCG(1, 2))
	r.cfg.CrashHook = func(p CrashPoint) bool {
		if r.crash[p] {
			delete(r.crash, p)
			return true
		}
		return false
	}
	if mutate != nil {
		mutate(&r.cfg)
	}
	return r
}

// boot builds a fresh engine on the rig's store (first boot or restart)
// and feeds it Start with the rig's registry.
func (r *rig) boot() Ready {
	r.t.Helper()
	store := r.store
	if store == nil {
		store = r.st
	}
	eng, err := New(r.cfg, store)
	require.NoError(r.t, err)
	r.eng = eng
	r.timers = map[uint64]time.Time{} // the old engine's timers died with it
	return r.step(Start{Registry: r.reg})
}

func (r *rig) collect(rd Ready) {
	r.readies = append(r.readies, rd)
	r.sends = append(r.sends, rd.Sends...)
	r.subs = append(r.subs, rd.Subscribes...)
	r.notes = append(r.notes, rd.Notes...)
	r.writes = append(r.writes, rd.CursorWrites...)
	for _, tm := range rd.Timers {
		r.timers[tm.ID] = tm.At
	}
}

func (r *rig) step(in Input) Ready {
	r.t.Helper()
	require.NoError(r.t, r.eng.Step(in))
	rd := r.eng.Ready()
	r.collect(rd)
	return rd
}

// stepErr feeds an input that may crash the engine.
func (r *rig) stepErr(in Input) error {
	err := r.eng.Step(in)
	r.collect(r.eng.Ready())
	return err
}

// advance moves the clock forward by d, firing due timers in (At, ID)
// order at their instants.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	end := r.clk.t.Add(d)
	for {
		var id uint64
		var at time.Time
		for tid, tat := range r.timers {
			if tat.After(end) {
				continue
			}
			if id == 0 || tat.Before(at) || (tat.Equal(at) && tid < id) {
				id, at = tid, tat
			}
		}
		if id == 0 {
			break
		}
		delete(r.timers, id)
		if at.After(r.clk.t) {
			r.clk.t = at
		}
		r.step(TimerFired{TimerID: id})
	}
	r.clk.t = end
}

// takeSends returns the sends collected so far and forgets them.
func (r *rig) takeSends() []Send {
	s := r.sends
	r.sends = nil
	return s
}

func (r *rig) reply(s Send, o Outcome) Ready {
	r.t.Helper()
	res := WebhookResult{RequestID: s.RequestID, Outcome: o}
	if o == OutcomeStatus {
		res.Status = 503
	}
	return r.step(res)
}

func (r *rig) notesOf(kind string) []Note {
	var out []Note
	for _, n := range r.notes {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

func (r *rig) messages(bot string) []impl.Message {
	r.t.Helper()
	ms, err := r.mem.ListMessages(context.Background(), bot)
	require.NoError(r.t, err)
	return ms
}

func (r *rig) eventIDs(bot string) []string {
	var ids []string
	for _, m := range r.messages(bot) {
		ids = append(ids, m.EventID)
	}
	slices.Sort(ids)
	return ids
}

func (r *rig) cursor(stream string) (impl.Cursor, bool) {
	r.t.Helper()
	c, ok, err := r.mem.GetCursor(context.Background(), impl.CursorKey{Stream: stream})
	require.NoError(r.t, err)
	return c, ok
}

func pos(mb, idx int64) impl.Position { return impl.Position{Major: mb, Minor: idx} }

func logEvent(stream string, mb, idx int64) Event {
	id := fmt.Sprintf("%s/%d.%d", stream, mb, idx)
	return Event{ID: id, Stream: stream, Pos: pos(mb, idx), Payload: []byte("payload of " + id)}
}

func tsEvent(stream string, ms int64, id string) Event {
	return Event{ID: id, Stream: stream, Pos: impl.Position{Major: ms, ID: id}, Payload: []byte("payload of " + id),
		CreatedAt: time.UnixMilli(ms).UTC()}
}

func member(stream, bot string, from impl.Position) Membership {
	return Membership{Stream: stream, Kind: LogStream, Bot: bot, From: from, Member: true}
}

func sendIDs(ss []Send) []string {
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.EventID)
	}
	return ids
}

func batch(stream string, cookie string, evs ...Event) UpstreamBatch {
	return UpstreamBatch{Stream: stream, Kind: LogStream, Events: evs, Cookie: []byte(cookie)}
}

// mixedRegistry has three bots on two streams: b2 without its key yet, and
// memberships of s2 starting at different positions.
func mixedRegistry() Registry {
	return Registry{
		Bots: []Bot{{ID: "b1", Secret: []byte("1"), HasKey: true}, {ID: "b2", Secret: []byte("2")}, {ID: "b3", Secret: []byte("3"), HasKey: true}},
		Memberships: []Membership{
			member("s1", "b1", impl.Position{}), member("s1", "b2", impl.Position{}),
			member("s2", "b3", pos(1, 0)), member("s2", "b1", pos(2, 0)),
		},
	}
}

// expectLeasedThenResent checks what a crash after the store write and
// before the send leaves for bot "b": the one message, event, written and
// leased to the dead incarnation, which a restarted engine sends only once
// that lease lapses.
func (r *rig) expectLeasedThenResent(event string) {
	r.t.Helper()
	ms := r.messages("b")
	require.Len(r.t, ms, 1, "the message was written, leased, before the crash")
	assert.Equal(r.t, event, ms[0].EventID)
	assert.Equal(r.t, t0.Add(30*time.Second), ms[0].LeaseUntil)

	r.boot()
	assert.Empty(r.t, r.takeSends(), "the dead incarnation's lease still holds")
	r.advance(30 * time.Second)
	ss := r.takeSends()
	require.Len(r.t, ss, 1, "sent once the lease lapses")
	assert.Equal(r.t, event, ss[0].EventID)
}

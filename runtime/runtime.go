// Package runtime is the reference engine as a real service: it drives the
// unchanged sans-IO engine (impl/engine) with Step and carries out its
// Ready effects for real — webhook requests over net/http, timers on the
// wall clock, async cursor writes, the store — against an upstream and a
// registry that speak the HTTP protocol of runtime/PROTOCOL.md.
//
// One goroutine owns the engine (it is single-threaded by contract); every
// I/O goroutine (stream pollers, the registry poller, webhook senders,
// timers, cursor writers) reports back through channels that goroutine
// reads. This is the only package, with cmd/ and bench/, that may read the
// wall clock and start goroutines.
//
// Crash safety is the engine's: it moves a stream's durable cursor only
// over events it has handed off durably (queued, or answered 2xx), so a
// SIGKILL at any instant loses nothing — the next process subscribes from
// the cursor and the upstream replays everything after it. SIGTERM (a
// canceled context) drains: pollers stop, in-flight requests finish and
// their results are recorded, then Run returns.
package runtime

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"context"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

var errNoBlind = errors.New("runtime: the store has no blind cursor write (impl.BlindCursorWriter)")

var errNoLeased = errors.New("runtime: the store has no leased enqueue (impl.LeasingEnqueuer)")

var errNoHandOff = errors.New("runtime: the store has no combined hand-off write (impl.HandOffWriter)")

// Options configure Run.
type Options struct {
	// Engine is the engine's configuration. Clock and Rand are the
	// runtime's (the wall clock, and a PCG seeded from crypto/rand) unless
	// set; CrashHook must be nil (a real process crashes for real).
	Engine engine.Config
	// Store is the durable store (Run does not close it).
	Store impl.Store
	// Upstream and Registry are the base URLs of the two protocol servers.
	Upstream string
	Registry string

	Logger  *slog.Logger // default: slog.Default()
	Metrics *Metrics     // default: a fresh one (not served)

	// PollWait is how long one long-poll may wait for news (default 10s).
	PollWait time.Duration
	// StoreTimeout bounds every store call (default 5s).
	StoreTimeout time.Duration
	// DrainTimeout bounds the wait for in-flight requests at shutdown
	// (default 10s).
	DrainTimeout time.Duration
	// SampleEvery is the period of the queue-depth sample (default 5s).
	SampleEvery time.Duration
	// Ready, if set, is called once the engine has started.
	Ready func()
	// Plant switches on planted wire-visible faults (plant.go); the zero
	// value is the reference.
	Plant Plants
	// RetentionHeldOnly limits the engine's retention (its TTL and per-bot
	// cap) to the messages of bots whose key the runtime has not yet seen
	// published: the enqueued messages of seed 000 that seed 003 ages and
	// caps. A message of a bot with a key is never dropped then, so a short
	// TTL cannot cut a retry schedule short. It needs a store that scopes
	// retention (the Postgres store). False: every queued message.
	RetentionHeldOnly bool
}

func (o *Options) defaults() error {
	if o.Store == nil {
		return errors.New("runtime: Options.Store is nil; pass an impl.Store")
	}
	if o.Upstream == "" || o.Registry == "" {
		return errors.New("runtime: the upstream and registry URLs are required (--upstream, --registry)")
	}
	if o.Engine.CrashHook != nil {
		return errors.New("runtime: Engine.CrashHook must be nil in a real process")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.PollWait <= 0 {
		o.PollWait = 10 * time.Second
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 5 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 10 * time.Second
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.Engine.Clock == nil {
		o.Engine.Clock = wallClock{}
	}
	if o.Engine.Rand == nil {
		var seed [16]byte
		_, _ = cryptorand.Read(seed[:])
		o.Engine.Rand = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	return nil
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// loop is the state of one Run. Fields without a comment belong to the
// engine goroutine alone.
type loop struct {
	o   Options
	log *slog.Logger
	m   *Metrics
	eng *engine.Engine
	// store is o.Store with every call bounded in time (timedStore).
	store impl.Store

	in      chan engine.Input         // from timers, cursor writers
	results chan engine.WebhookResult // from webhook senders
	batches chan upBatch              // from stream pollers
	regs    chan protocol.Registry    // from the registry poller

	regVersion int64 // the registry version applied to the engine

	pollCtx context.Context // canceled when draining starts
	sendCtx context.Context // canceled when the drain gives up
	pollers map[string]context.CancelFunc
	pollGen map[string]int // the current subscription of each stream (upBatch.gen)
	timers  map[uint64]*time.Timer
	reqs    map[uint64]sentReq
	busy    sync.WaitGroup // webhook senders and cursor writers
	pending int            // of those, how many have not reported back
	drain   bool

	bots    *botBook // registry poller writes, senders read
	client  *http.Client
	webhook *http.Client

	firstSeen map[string]time.Time  // event -> when it first reached this process (delivery latency)
	lag       map[string][]lagEntry // stream -> received events the cursor has not passed
	started   atomic.Bool
}

type sentReq struct {
	bot, event string
}

type lagEntry struct {
	pos impl.Position
	at  time.Time
}

// Run runs the engine until ctx is canceled, then drains and returns nil;
// it returns an error only if it could not start.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	m := o.Metrics
	m.mu.Lock()
	m.overcount = o.Plant.OvercountAcked
	m.mu.Unlock()
	if o.Plant.SnapshotSharedBaseline {
		o.Engine.Bugs.SharedSnapshotBaseline = true
	}
	per := o.Engine.MaxInFlightPerBot
	bots := newBotBook(per)
	var held func() []string
	if o.RetentionHeldOnly {
		if _, ok := o.Store.(scopedRetention); !ok {
			return errors.New("runtime: retention limited to held messages needs a store that scopes retention (the Postgres store)")
		}
		held = bots.held
	}
	store := wrapStore(o.Store, o.StoreTimeout, func(method string) { m.storeErrors.WithLabelValues(method).Inc() }, held)
	store.keepOldest = o.Plant.RetentionKeepsOldest
	eng, err := engine.New(o.Engine, store)
	if err != nil {
		return err
	}
	l := &loop{
		o: o, log: o.Logger, m: m, eng: eng, store: store,
		in:      make(chan engine.Input, 64),
		results: make(chan engine.WebhookResult, 256),
		batches: make(chan upBatch),
		regs:    make(chan protocol.Registry),
		pollers: map[string]context.CancelFunc{},
		pollGen: map[string]int{},
		timers:  map[uint64]*time.Timer{},
		reqs:    map[uint64]sentReq{},
		bots:    bots,
		client:  &http.Client{Timeout: o.PollWait + 10*time.Second},
		webhook: &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: per,
			MaxConnsPerHost:     per,
			IdleConnTimeout:     90 * time.Second,
		}},
		firstSeen: map[string]time.Time{},
		lag:       map[string][]lagEntry{},
	}
	defer l.webhook.CloseIdleConnections()
	return l.run(ctx)
}

func (l *loop) run(ctx context.Context) error {
	reg, err := l.fetchRegistryUntil(ctx)
	if err != nil {
		return err
	}
	pollCtx, stopPolls := context.WithCancel(context.Background())
	defer stopPolls()
	sendCtx, stopSends := context.WithCancel(context.Background())
	defer stopSends()
	l.pollCtx, l.sendCtx = pollCtx, sendCtx

	start, err := l.bots.load(reg)
	if err != nil {
		return fmt.Errorf("runtime: registry: %w", err)
	}
	if !l.step(engine.Start{Registry: start}) {
		return errors.New("runtime: the engine did not start")
	}
	l.regVersion = reg.Version
	l.started.Store(true)
	l.m.ready.Set(1)
	l.log.Info("engine started", "node", l.o.Engine.Node, "bots", len(start.Bots), "memberships", len(start.Memberships))
	if l.o.Ready != nil {
		l.o.Ready()
	}
	go l.pollRegistry(pollCtx, reg.Version)
	go l.sampleQueue(pollCtx)
	go l.pollRepos(pollCtx)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return l.shutdown(stopPolls, stopSends)
		case in := <-l.in:
			l.step(in)
		case r := <-l.results:
			l.stepResults(r)
		case reg := <-l.regs:
			l.applyRegistry(reg)
		case ub := <-l.batches:
			// Catching up with the registry may itself rewind the stream
			// (a join behind its head): the batch is then stale too.
			if ub.gen == l.pollGen[ub.b.Stream] && l.catchUpRegistry(ub.regVersion) && ub.gen == l.pollGen[ub.b.Stream] {
				l.step(ub.b)
			}
		case <-tick.C:
			l.refreshGauges()
		}
	}
}

// shutdown drains: no more upstream input or timers; the requests in
// flight finish (bounded by DrainTimeout) and their results reach the
// engine, which records them in the store.
func (l *loop) shutdown(stopPolls, stopSends context.CancelFunc) error {
	l.drain = true
	l.m.ready.Set(0)
	stopPolls()
	for id, t := range l.timers {
		t.Stop()
		delete(l.timers, id)
	}
	l.log.Info("draining", "in_flight", l.pending)
	deadline := time.NewTimer(l.o.DrainTimeout)
	defer deadline.Stop()
	for l.pending > 0 {
		select {
		case r := <-l.results:
			l.stepResults(r)
		case in := <-l.in:
			if _, ok := in.(engine.CursorWriteDone); ok {
				l.step(in)
			}
		case <-deadline.C:
			l.log.Warn("drain timed out; abandoning in-flight requests", "in_flight", l.pending)
			stopSends()
			l.busy.Wait()
			return nil
		}
	}
	stopSends()
	l.busy.Wait()
	l.log.Info("drained", "counters", fmt.Sprintf("%+v", l.eng.Counters()))
	return nil
}

// step feeds one input and carries out the effects; false if the engine
// refused it.
func (l *loop) step(in engine.Input) bool {
	switch v := in.(type) {
	case engine.TimerFired:
		delete(l.timers, v.TimerID)
	case engine.CursorWriteDone:
		l.pending--
	case engine.UpstreamBatch:
		l.received(v)
	}
	if err := l.eng.Step(in); err != nil {
		l.log.Error("engine step failed", "input", fmt.Sprintf("%T", in), "err", err)
		return false
	}
	l.apply(l.eng.Ready())
	l.m.setCounters(l.eng.Counters())
	return true
}

// stepResults hands r and every other result already waiting to the
// engine in one WebhookResults (one store call for their acks).
func (l *loop) stepResults(r engine.WebhookResult) {
	batch := []engine.WebhookResult{r}
	for len(batch) < 512 {
		select {
		case more := <-l.results:
			batch = append(batch, more)
			continue
		default:
		}
		break
	}
	now := time.Now()
	for _, r := range batch {
		l.pending--
		sr, ok := l.reqs[r.RequestID]
		delete(l.reqs, r.RequestID)
		if ok && r.Outcome == engine.OutcomeOK {
			if t, seen := l.firstSeen[sr.event]; seen {
				l.m.delivery.Observe(now.Sub(t).Seconds())
			}
		}
	}
	if len(batch) == 1 {
		l.step(batch[0])
		return
	}
	l.step(engine.WebhookResults{Results: batch})
}

func (l *loop) apply(r engine.Ready) {
	for _, n := range r.Notes {
		l.noted(n)
	}
	if l.drain {
		// Nothing new starts while draining. Requests the engine asks
		// for now stay leased (queued hand-off) or before the cursor
		// (direct hand-off): the next process sends them.
		for _, cw := range r.CursorWrites {
			l.cursorWrite(cw)
		}
		return
	}
	for _, s := range r.Subscribes {
		l.subscribe(s)
	}
	for _, s := range r.Sends {
		l.send(s)
	}
	for _, t := range r.Timers {
		l.timer(t)
	}
	for _, cw := range r.CursorWrites {
		l.cursorWrite(cw)
	}
}

func (l *loop) noted(n engine.Note) {
	switch n.Kind {
	case "dead":
		l.m.deadLetters.WithLabelValues(n.Bot).Inc()
		l.log.Warn("dead letter", "bot", n.Bot, "event", n.EventID, "attempts", n.Count, "reason", n.Detail)
	case "breaker":
		if v, ok := breakerState(n.Detail); ok {
			l.m.breaker.WithLabelValues(n.Bot).Set(v)
		}
		l.log.Info("breaker", "bot", n.Bot, "change", n.Detail)
	case "cursor":
		l.cursorMoved(n.Stream, n.Pos)
	case "store-error":
		l.log.Warn("store error", "detail", n.Detail)
	default:
		l.log.Debug("note", "kind", n.Kind, "bot", n.Bot, "event", n.EventID, "stream", n.Stream, "detail", n.Detail)
	}
}

func (l *loop) timer(t engine.Timer) {
	id := t.ID
	l.timers[id] = time.AfterFunc(time.Until(t.At), func() {
		select {
		case l.in <- engine.TimerFired{TimerID: id}:
		case <-l.pollCtx.Done():
		}
	})
}

func (l *loop) cursorWrite(cw engine.CursorWrite) {
	l.pending++
	l.busy.Add(1)
	go func() {
		defer l.busy.Done()
		var err error
		if cw.Blind {
			err = l.store.(impl.BlindCursorWriter).PutCursorBlind(context.Background(), cw.Cursor)
		} else {
			_, err = l.store.AdvanceCursors(context.Background(), []impl.Cursor{cw.Cursor})
		}
		// Delivered even while draining (the drain waits for it), unless
		// the drain gave up.
		select {
		case l.in <- engine.CursorWriteDone{WriteID: cw.WriteID, Err: err}:
		case <-l.sendCtx.Done():
		}
	}()
}

// received books the batch for the latency and cursor-lag metrics.
func (l *loop) received(b engine.UpstreamBatch) {
	now := time.Now()
	l.m.upstream.WithLabelValues(b.Stream).Add(float64(len(b.Events)))
	q := l.lag[b.Stream]
	for _, e := range b.Events {
		if _, ok := l.firstSeen[e.ID]; !ok && len(l.firstSeen) < 1_000_000 {
			l.firstSeen[e.ID] = now
		}
		if len(q) < 100_000 {
			q = append(q, lagEntry{pos: e.Pos, at: now})
		}
	}
	l.lag[b.Stream] = q
}

func (l *loop) cursorMoved(stream string, pos impl.Position) {
	q := l.lag[stream]
	i := 0
	for i < len(q) && q[i].pos.Compare(pos) <= 0 {
		i++
	}
	// Events can arrive out of order (timestamp streams, replays): drop
	// every entry the cursor now covers, not only a prefix.
	kept := q[:0]
	for _, e := range q[i:] {
		if e.pos.Compare(pos) > 0 {
			kept = append(kept, e)
		}
	}
	l.lag[stream] = kept
}

func (l *loop) refreshGauges() {
	now := time.Now()
	streams := make([]string, 0, len(l.lag))
	for s := range l.lag {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	for _, s := range streams {
		q := l.lag[s]
		l.m.cursorLagEvs.WithLabelValues(s).Set(float64(len(q)))
		age := 0.0
		if len(q) > 0 {
			oldest := q[0].at
			for _, e := range q {
				if e.at.Before(oldest) {
					oldest = e.at
				}
			}
			age = now.Sub(oldest).Seconds()
		}
		l.m.cursorLag.WithLabelValues(s).Set(age)
	}
	for id, t := range l.firstSeen {
		if now.Sub(t) > 10*time.Minute {
			delete(l.firstSeen, id)
		}
	}
}

// sampleQueue counts the store's live and dead messages per bot for
// /metrics, on its own goroutine (the store is safe for concurrent use).
func (l *loop) sampleQueue(ctx context.Context) {
	t := time.NewTicker(l.o.SampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, l.o.StoreTimeout)
		msgs, err := l.o.Store.ListMessages(c, "")
		cancel()
		if err != nil {
			continue
		}
		live, dead := map[string]int{}, map[string]int{}
		for _, b := range l.bots.ids() {
			live[b], dead[b] = 0, 0
		}
		for _, m := range msgs {
			if m.Dead {
				dead[m.Subscriber]++
			} else {
				live[m.Subscriber]++
			}
		}
		for b, n := range live {
			l.m.queueDepth.WithLabelValues(b).Set(float64(n))
		}
		for b, n := range dead {
			l.m.deadInStore.WithLabelValues(b).Set(float64(n))
		}
	}
}

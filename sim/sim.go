// Package sim is the deterministic simulator: a single-threaded
// discrete-event loop over virtual time that drives the sans-IO delivery
// engine against simulated upstream streams, bots (with the real receiver
// SDK), a store, and the faults of a faults.Plan, then checks the run with
// oracle.Check.
//
// Every source of nondeterminism is derived from Config.Seed: each actor
// draws from its own PCG stream (PCG(seed, fnv64a(actor name))), events run
// in (virtual time, scheduling sequence) order, and nothing iterates a Go
// map into the trace. The same seed therefore gives the same trace, byte
// for byte, on every run, machine and backend.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/internal/bounds"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Epoch is virtual time zero.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Config is one simulation.
type Config struct {
	Seed uint64
	// Workload defaults to DrawWorkload(Seed); Plan to faults.Draw(Seed).
	Workload *Workload
	Plan     *faults.Plan
	// Engine, if set, adjusts each node's engine config after the defaults
	// and the workload's settings (Node, Clock, Rand and CrashHook are the
	// simulator's and are set afterwards).
	Engine func(*engine.Config)
	// Bugs switches on known-bug engine variants (and, for
	// NoReceiverDedup, the receivers' variant).
	Bugs engine.Bugs
	// Store opens a fresh, empty store; nil means memstore.New(). Run
	// closes it when done.
	Store func() (impl.Store, error)
	// Schedule is an explicit fault schedule, applied on top of the
	// schedule drawn from Plan (use faults.None() as the Plan for a
	// schedule alone). Where both have a fault for the same site, the
	// explicit one wins.
	Schedule []Fault
	// Wire, if set, rewrites each webhook request as it leaves an engine
	// node: tests plant engine bugs (a bad signature, a stale timestamp)
	// with it. Nil in every real run.
	Wire func(*engine.Send)
	// MaxSteps bounds the events the run may execute (0 means
	// DefaultMaxSteps). A run that reaches it stops with a *BudgetError
	// instead of looping: virtual time is bounded by the liveness deadline,
	// but a cycle of same-instant events would not be. Deterministic: the
	// same run hits it at the same step.
	MaxSteps int64
	// Context, if set, is the context of every store call, and a run whose
	// context is done stops before its next event and returns the cause.
	// It is the caller's environment, not part of the simulation: the CLI
	// cancels it when the database goes away mid-sweep, so the seeds in
	// flight are abandoned (no verdict) instead of retrying a dead server
	// until their virtual deadline.
	Context context.Context
	// TraceHashOnly keeps no trace records: each line is hashed as it is
	// made and Result.Trace is nil (TraceHash and TraceLines are the
	// same as a full run's). A sweep needs only the hash; keeping every
	// record costs a run most of its allocations and its live heap.
	TraceHashOnly bool
	// NoTrace keeps no trace at all, not even its hash: Result.Trace is
	// nil and Result.TraceHash is "" (TraceLines still counts the lines
	// a trace would have). For callers that read neither: a sweep that
	// does not check determinism. Formatting and hashing every line was
	// about a tenth of such a sweep's instructions. Everything else a run
	// produces (verdicts, coverage, counters, what fired) is the same.
	NoTrace bool
	// Stages, if set, is charged the wall time of each stage of the run
	// (benchmarks only; see StageTimer). The caller starts and stops it.
	Stages *StageTimer
	// Redraw, if set, runs the seed's run exactly up to a step and then
	// continues it with fresh randomness (see Redraw): one of the many
	// ways the run could have gone on from that step's state. Cause
	// analysis (package cause) branches a failing run this way.
	Redraw *Redraw
	// BugsThrough, if positive, keeps the engines' known-bug switches
	// (Bugs, but NoReceiverDedup, the bots' variant) on through that step
	// only; from the next they run as the reference engine
	// (engine.Engine.SwitchBugs). A run whose trace differs from the
	// reference engine's only if BugsThrough >= k tells that the variant
	// first acted, with an effect, at step k.
	BugsThrough int64
}

// Redraw branches a run after step After: steps 1..After (and the set-up
// before them) draw what the seed draws, so they happen exactly as in the
// run without Redraw; from step After+1 on, every actor's random stream
// (latencies, fault coins, production times, the engines' jitter) is
// replaced by one derived from (Seed, After, Trial) and the actor's name,
// and the explicit schedule (Config.Schedule) is dropped, the rest of a
// fault window included. The workload and the faults the plan fixes up
// front (late keys) stay. Each (After, Trial) is one deterministic
// continuation: the same values give the same run.
//
// With Reference, the engines also drop their known-bug switches from step
// After+1 on (engine.Engine.SwitchBugs; nodes booted later boot without
// them): a planted bug's action is a decision the engine makes at a step,
// and the continuation re-draws it as the reference engine would decide.
// The receivers keep theirs (NoReceiverDedup is the bots' variant).
type Redraw struct {
	After     int64
	Trial     uint64
	Reference bool
}

// bugsOff is the last step the engines' known-bug switches are on
// through (Config.BugsThrough, Redraw.Reference), or -1 for every step.
func (s *sim) bugsOff() int64 {
	off := int64(-1)
	if s.cfg.BugsThrough > 0 {
		off = s.cfg.BugsThrough
	}
	if r := s.cfg.Redraw; r != nil && r.Reference && (off < 0 || r.After < off) {
		off = r.After
	}
	return off
}

// engineBugs are the known-bug switches of an engine booted or running now.
func (s *sim) engineBugs() engine.Bugs {
	if off := s.bugsOff(); off >= 0 && s.step > off {
		return engine.Bugs{NoReceiverDedup: s.cfg.Bugs.NoReceiverDedup}
	}
	return s.ecfg.Bugs
}

func runContext(cfg Config) context.Context {
	if cfg.Context != nil {
		return cfg.Context
	}
	return context.Background()
}

// DefaultMaxSteps is far above any run the workload draws (a few thousand
// steps) and bounds a run's memory: the trace is kept whole, about 1.5 KB a
// step in the worst runs the fuzzer found (a long store-error window on
// Claim, where store-retry timers pile up), so a million steps stays under
// about 1.5 GB.
const DefaultMaxSteps = 1_000_000

// SweepGCPercent is the garbage-collection target a sweep of runs sets
// (cmd/deliverysim's sweep, and bench's BenchmarkSweep so that it measures
// the sweep as it runs). A run's live heap is a few MB and it allocates
// many times that, so under the default target (GOGC=100) the collector
// ran several times a run and took about a quarter of a sweep's CPU. 800
// trades a bounded amount of memory for most of the rest: `sweep
// --parallel 2` peaks at about 230 MB RSS instead of 145 MB at 400 for
// seeds 1-500, and 295 MB instead of 210 MB for seeds 1-10000 (the report
// grows with the range); seeds 1-500 took 9 % less CPU than at 400.
const SweepGCPercent = 800

// BudgetError is a run stopped by Config.MaxSteps.
type BudgetError struct {
	Steps int64
	At    time.Duration // virtual time since Epoch when it stopped
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("the simulation hit its step budget of %d steps at %v of virtual time without finishing; "+
		"raise the budget or shrink the workload (if the workload is small, this is a simulator bug: report it with the seed)", e.Steps, e.At)
}

// Counters summarise a run.
type Counters struct {
	Events         int `json:"events"`
	Obligations    int `json:"obligations"`
	Sends          int `json:"sends"`
	Deliveries     int `json:"deliveries"` // handler runs
	Duplicates     int `json:"duplicates"` // requests the receivers dropped as seen, plus repeated handler runs
	Retries        int `json:"retries"`    // sends with Attempt > 1
	DeadLetters    int `json:"dead_letters"`
	RetentionDrops int `json:"retention_drops"`
	Rejected       int `json:"rejected"` // requests the receivers refused (signature, timestamp)
	Crashes        int `json:"crashes"`
	Batches        int `json:"batches"`
	EngineErrors   int `json:"engine_errors"` // Step errors other than ErrCrashed
}

// Add adds o into c: the totals of a sweep.
func (c *Counters) Add(o Counters) {
	c.Events += o.Events
	c.Obligations += o.Obligations
	c.Sends += o.Sends
	c.Deliveries += o.Deliveries
	c.Duplicates += o.Duplicates
	c.Retries += o.Retries
	c.DeadLetters += o.DeadLetters
	c.RetentionDrops += o.RetentionDrops
	c.Rejected += o.Rejected
	c.Crashes += o.Crashes
	c.Batches += o.Batches
	c.EngineErrors += o.EngineErrors
}

// Result is everything a run produced.
type Result struct {
	Seed      uint64
	Workload  Workload
	Plan      faults.Plan
	Trace     []Record // nil under Config.TraceHashOnly and Config.NoTrace
	TraceHash string   // "" under Config.NoTrace
	// TraceLines is how many records the trace has.
	TraceLines int
	Counters   Counters
	Faults     map[faults.Kind]int // injected, per kind (every kind present)
	// Fired lists every fault the run injected, in order, exactly where it
	// fired: as a schedule, it replays the run without rolling any dice
	// (the minimizer's input).
	Fired []Fired
	// Unfired lists the explicit schedule's entries (Config.Schedule)
	// that matched no site: the run never reached what they aimed at.
	Unfired    []faults.Fault
	Violations []oracle.Violation
	Stats      oracle.CheckStats
	Engine     engine.Counters // summed over every node incarnation
	Params     oracle.CheckParams
	HealAt     time.Time
	End        time.Time
	Quiescent  bool // stopped because nothing was left to do (else: the deadline)
	// Coverage counts each situation of the catalogue (Catalogue) the run
	// reached; every probe is present.
	Coverage map[string]int
	// Payloads holds the payloads a rewritten run cannot make again by
	// default: corner-case ones and those an explicit workload gave, by
	// event id.
	Payloads map[string][]byte
	// Produced lists every event the upstream produced, in order: with
	// Fired, the minimizer's input (it reads no trace text).
	Produced []ProducedEvent
}

// ProducedEvent is one event the upstream produced, as an explicit
// workload writes it.
type ProducedEvent struct {
	Stream   string
	At       time.Duration // since Epoch
	ID       string
	Producer int // timestamp streams: index into ProducerSkews
}

// TraceText is the formatted trace.
func (r *Result) TraceText() []byte { return FormatTrace(r.Trace) }

// Run executes one simulation.
func Run(cfg Config) (*Result, error) {
	w := DrawWorkload(cfg.Seed)
	if cfg.Workload != nil {
		w = *cfg.Workload
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	plan := faults.Draw(cfg.Seed)
	if cfg.Plan != nil {
		plan = *cfg.Plan
	}
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	w.raiseSkewFloor(plan) // a drawn skew budget (SkewBudgetSet) only
	w.raiseToleranceFloor(plan)
	if err := ValidateSchedule(w, cfg.Schedule); err != nil {
		return nil, err
	}
	var store impl.Store
	if cfg.Store != nil {
		var err error
		if store, err = cfg.Store(); err != nil {
			return nil, err
		}
	} else {
		store = memstore.New()
	}
	defer store.Close()

	s := newSim(cfg, w, plan, store)
	if err := s.run(); err != nil {
		return nil, err
	}
	return s.result()
}

type sim struct {
	dedupProbed bool // a dedup window probe is scheduled (boundaries_receiver.go)

	cfg   Config
	w     Workload
	plan  faults.Plan
	store impl.Store
	ctx   context.Context
	ecfg  engine.Config // the engine settings every node runs with

	q        eventQueue
	now      time.Time
	step     int64
	trace    []Record
	th       *traceHasher    // Config.TraceHashOnly: the trace's hash so far
	untraced int             // Config.NoTrace: the lines not traced
	chk      *oracle.Checker // fed each observation as it happens: a run keeps none
	active   bool            // faults are being injected
	healAt   time.Time
	deadline time.Time
	stopped  bool
	fatal    error

	streams  []*stream
	byStream map[string]*stream
	bots     []*bot
	byBot    map[string]*bot
	nodes    []*node

	regBots    []engine.Bot
	regMembers []engine.Membership

	faultCount map[faults.Kind]int
	counters   Counters
	engTotals  engine.Counters
	healthy    []string

	// Work in flight, for quiescence.
	inflight, pendingFlush, pendingCursor int
	activity, quietActivity               int
	quietOnce                             bool
	quiescent                             bool

	churnRng *rand.Rand
	// backRng: how far behind the head a churn join starts (its own
	// stream, so that drawing it shifts no other draw).
	backRng *rand.Rand
	// listRng: how the snapshot worker lists a source (sim/snapshot.go).
	listRng *rand.Rand
	messy   bool

	// queue is the store's message list as a retention call last listed
	// it (observedStore.currentQueue): queueListed says there is one, and
	// for a versioned backend queueVersion is the version it was listed at.
	queue        []impl.Message
	queueListed  bool
	queueVersion uint64

	sched    *faults.Book       // the explicit schedule (Config.Schedule)
	drawn    faults.Schedule    // the schedule drawn from the plan
	chances  faults.ChanceIndex // drawn's chances by kind
	fired    []Fired            // see Result.Fired
	sources  []*source
	sendSeq  int64
	feedNode int // index of the node the snapshot worker feeds, -1 = none
	feedInc  int // and its incarnation

	ords ordCounter // see ordinal

	// Corner-case inputs and the coverage catalogue.
	cids     cornerIDs
	traits   *traitBook
	evTraits map[string]trait
	cov      *coverage
	payloads map[string][]byte // see Result.Payloads
	produced []ProducedEvent   // see Result.Produced

	wire rxWire // see receive
	// tsStr is strconv.FormatInt(tsNum, 10): the webhook-timestamp header
	// of the last delivery (see tsText).
	tsNum int64
	tsStr string
}

// tsText is strconv.FormatInt(ts, 10), the webhook-timestamp header a
// request carries, kept for the next request of the same second (a
// batch's sends and every copy of a request share theirs).
func (s *sim) tsText(ts int64) string {
	if ts != s.tsNum || s.tsStr == "" {
		s.tsNum, s.tsStr = ts, strconv.FormatInt(ts, 10)
	}
	return s.tsStr
}

// ordinal returns how many times key happened earlier in the current
// instant, and counts this one (a scheduled fault names which of several
// same-instant requests it hits).
// Counted as node.ordinal is (ordCounter).
func (s *sim) ordinal(class, name string) int { return s.ords.next(s.now, class, name) }

func newSim(cfg Config, w Workload, plan faults.Plan, store impl.Store) *sim {
	s := &sim{
		cfg: cfg, w: w, plan: plan, store: store, ctx: runContext(cfg),
		now: Epoch, active: true,
		byStream:   map[string]*stream{},
		byBot:      map[string]*bot{},
		faultCount: map[faults.Kind]int{},
		sched:      faults.NewBook(cfg.Schedule),
		feedNode:   -1,
	}
	s.churnRng, s.backRng = s.actorRand("registry/churn"), s.actorRand("registry/backfill")
	s.cids = cornerIDs{num: w.NumericIDBase, used: map[string]bool{}}
	s.traits, s.evTraits, s.payloads = newTraitBook(), map[string]trait{}, map[string][]byte{}
	s.cov = newCoverage(s)
	s.healAt = Epoch.Add(w.FaultWindow)
	s.deadline = s.healAt.Add(w.Liveness + 10*time.Minute)
	s.ecfg = s.engineConfig()
	if cfg.TraceHashOnly {
		s.th = &traceHasher{}
	}
	return s
}

// engineConfig is the workload's engine config with the caller's bugs and
// tweaks.
func (s *sim) engineConfig() engine.Config {
	c := s.w.EngineConfig()
	c.Bugs = s.cfg.Bugs
	if s.cfg.Engine != nil {
		s.cfg.Engine(&c)
	}
	return c
}

func (s *sim) at(t time.Time, fn func()) {
	if t.Before(s.now) {
		t = s.now
	}
	s.q.push(t, fn)
}

func (s *sim) after(d time.Duration, fn func()) { s.at(s.now.Add(d), fn) }

// skipRec counts one untraced line and reports true in a NoTrace run: a
// frequent record whose fields cost a string or boxes to build (a position
// formatted) checks it before building them, as rec would drop them.
func (s *sim) skipRec() bool {
	if s.cfg.NoTrace {
		s.untraced++
		return true
	}
	return false
}

func (s *sim) rec(actor, kind string, fields ...any) {
	if s.cfg.NoTrace {
		s.untraced++
		return
	}
	prev := s.enter(StageTrace)
	if s.th != nil {
		s.th.rec(s.step, s.now, actor, kind, fields)
	} else {
		s.trace = append(s.trace, Record{Step: s.step, Time: s.now, Actor: actor, Kind: kind, Fields: kv(fields...)})
	}
	s.leave(prev)
}

func (s *sim) observe(o oracle.Observation) {
	o.Step, o.Time = s.step, s.now
	prev := s.enter(StageOracle)
	s.chk.Observe(&o)
	s.enter(StageCoverage)
	s.cov.see(&o)
	s.leave(prev)
}

// inject records one injected fault f, exactly where it fired (scheduled:
// it came from the explicit schedule), counts it and traces it with the
// given fields. It returns f's index in s.fired.
func (s *sim) inject(f faults.Fault, scheduled bool, actor string, fields ...any) int {
	s.faultCount[f.Kind]++
	if !s.skipRec() {
		fields = append([]any{"kind", string(f.Kind)}, fields...)
		if scheduled {
			fields = append(fields, "scheduled", true)
		}
		s.rec(actor, "fault", fields...)
	}
	s.fired = append(s.fired, Fired{Fault: f, Scheduled: scheduled})
	return len(s.fired) - 1
}

func (s *sim) run() error {
	s.setup()
	budget := s.cfg.MaxSteps
	if budget <= 0 {
		budget = DefaultMaxSteps
	}
	for s.q.len() > 0 && !s.stopped {
		if s.step >= budget {
			return &BudgetError{Steps: s.step, At: s.now.Sub(Epoch)}
		}
		if s.ctx.Err() != nil {
			return fmt.Errorf("run abandoned at %v of virtual time: %w", s.now.Sub(Epoch), context.Cause(s.ctx))
		}
		ev := s.q.pop()
		if ev.at.After(s.deadline) {
			s.now = s.deadline
			break
		}
		s.now = ev.at
		s.step++
		if s.redrawn() && s.step == s.cfg.Redraw.After+1 {
			// The explicit schedule is the prefix's: the continuation
			// draws its faults from the plan alone (Redraw).
			s.sched = faults.NewBook(nil)
		}
		if off := s.bugsOff(); off >= 0 && s.step == off+1 {
			for _, n := range s.nodes {
				if n.eng != nil {
					n.eng.SwitchBugs(s.engineBugs())
				}
			}
		}
		ev.fn()
		if s.fatal != nil {
			return s.fatal
		}
	}
	s.step++
	s.rec("sim", "end", "quiescent", s.quiescent)
	s.observe(oracle.Observation{Kind: oracle.ObsEnd})
	return nil
}

func (s *sim) setup() {
	s.rec("sim", "start", "seed", s.cfg.Seed, "plan", s.plan.String(), "nodes", s.w.Nodes,
		"streams", len(s.w.Streams), "bots", len(s.w.Bots), "cursor_mode", int(s.w.CursorMode), "handoff", int(s.w.HandOff),
		"max_attempts", s.ecfg.MaxAttempts, "ttl", s.ecfg.RetentionTTL, "cap", s.ecfg.RetentionMax)
	s.drawSchedule()
	s.setupBots()
	// The check's bounds are known once the healthy bots are, before the
	// first observation.
	s.chk = oracle.NewChecker(s.checkParams())
	s.setupStreams()
	s.setupSources()
	for i := 0; i < s.w.Nodes; i++ {
		n := s.newNode(i)
		s.nodes = append(s.nodes, n)
		s.at(Epoch, func() { s.boot(n) })
	}
	s.setupClockJumps()
	for _, st := range s.streams {
		s.scheduleProduction(st)
	}
	if s.drawn.Has(faults.MembershipChurn) {
		s.after(time.Minute, s.churnTick)
	}
	for _, f := range s.sched.Faults() {
		if f.Kind != faults.MembershipChurn {
			continue
		}
		fire := func() {
			if s.redrawn() {
				return
			}
			st := s.byStream[f.Stream]
			s.inject(f, true, "registry", "stream", f.Stream, "bot", f.Bot, "member", f.Member, "back", f.Back)
			s.addMembership(engine.Membership{
				Stream: f.Stream, Kind: st.spec.Kind, Bot: f.Bot, From: st.joinFrom(f.Member, f.Back), Member: f.Member,
			}, true)
		}
		if f.At >= time.Minute && f.At%time.Minute == 0 {
			// Where a drawn change would be: queued a minute earlier, by
			// the tick before it, so that it runs in the same order among
			// the other events of its instant (a node's housekeeping timer
			// on the minute) and a replay injects what the run did.
			s.at(Epoch.Add(f.At-time.Minute), func() { s.after(time.Minute, fire) })
			continue
		}
		s.at(Epoch.Add(f.At), fire)
	}
	if s.w.RequeueEvery > 0 {
		s.after(s.w.RequeueEvery, s.requeueTick)
	}
	s.at(s.healAt, s.heal)
}

// requeueTick is the operator requeueing dead letters during the fault
// window (Workload.RequeueEvery), through the first node that is up.
func (s *sim) requeueTick() {
	if !s.active {
		return
	}
	for _, n := range s.nodes {
		if n.up {
			s.requeueVia(n)
			break
		}
	}
	s.after(s.w.RequeueEvery, s.requeueTick)
}

// heal ends the fault window: nothing more is injected, outages end, and
// the run continues until quiescent or the liveness deadline.
func (s *sim) heal() {
	s.active = false
	for _, b := range s.bots {
		b.outageUntil = time.Time{}
	}
	s.rec("sim", "heal")
	s.observe(oracle.Observation{Kind: oracle.ObsHeal})
	if s.w.RequeueDead {
		s.after(30*time.Second, s.requeueDead)
	}
	s.after(s.quietEvery(), s.quietTick)
}

// quietEvery is the gap between two quiescence checks: a minute, or longer
// than the slowest source's scan interval, so that the quiet window always
// contains a scan of every source. A snapshot change that exhausted its
// attempts waits in the engine (not in the store) for the next scan to be
// retried; a window without a scan would call that quiet and end the run
// before the app could converge (seed 5586: snapshot-convergence).
func (s *sim) quietEvery() time.Duration {
	d := time.Minute
	for _, src := range s.w.Sources {
		d = max(d, src.ScanEvery+time.Second)
	}
	return d
}

// requeueDead is the operator's action: every dead letter is made live
// again, through the first node that is up.
func (s *sim) requeueDead() {
	var n *node
	for _, c := range s.nodes {
		if c.up {
			n = c
			break
		}
	}
	if n == nil {
		s.after(30*time.Second, s.requeueDead)
		return
	}
	s.requeueVia(n)
}

func (s *sim) requeueVia(n *node) {
	msgs, err := listShared(s.ctx, s.store)
	if err != nil {
		s.rec("operator", "list-error", "err", err.Error())
		return
	}
	for _, m := range msgs {
		if !m.Dead || !n.up {
			continue
		}
		s.activity++
		s.rec("operator", "requeue", "node", n.name, "bot", m.Subscriber, "event", m.EventID)
		s.observe(oracle.Observation{Kind: oracle.ObsRequeueAsked, Node: n.name, Bot: m.Subscriber, EventID: m.EventID})
		s.stepNode(n, engine.RequeueDead{Key: m.Key()}, "requeue")
	}
}

// quietTick stops the run once two checks quietEvery apart find nothing in
// flight, every node up, nothing live in the store, and no activity between.
func (s *sim) quietTick() {
	q := s.isQuiet()
	if q && s.quietOnce && s.activity == s.quietActivity {
		s.quiescent, s.stopped = true, true
		return
	}
	s.quietOnce, s.quietActivity = q, s.activity
	s.after(s.quietEvery(), s.quietTick)
}

func (s *sim) isQuiet() bool {
	if s.inflight > 0 || s.pendingFlush > 0 || s.pendingCursor > 0 {
		return false
	}
	for _, n := range s.nodes {
		if !n.up {
			return false
		}
	}
	msgs, err := listShared(s.ctx, s.store)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if !m.Dead {
			return false
		}
	}
	return true
}

func (s *sim) registry() engine.Registry {
	return engine.Registry{
		Bots:        slices.Clone(s.regBots),
		Memberships: slices.Clone(s.regMembers),
	}
}

// addMembership appends to the registry and tells every live node.
func (s *sim) addMembership(m engine.Membership, churn bool) {
	s.regMembers = append(s.regMembers, m)
	st := s.byStream[m.Stream]
	s.rec("registry", "membership", "stream", m.Stream, "bot", m.Bot, "from", posString(m.From), "member", m.Member)
	s.observe(oracle.Observation{
		Kind: oracle.ObsMembership, Stream: m.Stream, Bot: m.Bot, Pos: m.From, Member: m.Member,
		LogStream: st != nil && st.spec.Kind == engine.LogStream,
	})
	if !churn {
		return
	}
	for _, n := range s.nodes {
		if n.up {
			s.stepNode(n, engine.MembershipChanged{Membership: m}, "membership")
		}
	}
}

// churnTick: once a simulated minute during the fault window, maybe flip
// one bot's membership of one stream, effective after the stream's head.
func (s *sim) churnTick() {
	if !s.active {
		return
	}
	r := s.churnRng
	if _, ok := s.chance(faults.Site{Kind: faults.MembershipChurn}, r); ok && len(s.streams) > 0 && len(s.bots) > 0 {
		st := s.streams[r.IntN(len(s.streams))]
		b := s.bots[r.IntN(len(s.bots))]
		member := s.currentlyMember(st.spec.Name, b.spec.ID)
		// A third of the joins backfill: they start 1-40 events behind
		// the head (drawn for every change, from the stream of its own).
		back, deep := s.backRng.IntN(3) == 0, 1+s.backRng.IntN(40)
		if member || !back {
			deep = 0
		}
		s.inject(faults.Fault{Kind: faults.MembershipChurn, At: s.elapsed(), Stream: st.spec.Name, Bot: b.spec.ID, Member: !member, Back: deep},
			false, "registry", "stream", st.spec.Name, "bot", b.spec.ID, "member", !member, "back", deep)
		s.addMembership(engine.Membership{
			Stream: st.spec.Name, Kind: st.spec.Kind, Bot: b.spec.ID, From: st.joinFrom(!member, deep), Member: !member,
		}, true)
	}
	s.after(time.Minute, s.churnTick)
}

// joinFrom is where a churn entry starts: after the stream's head, or for
// a join that backfills back events, at the position that leaves the
// stream's last back events (by position) after it; before the first
// event (the zero position) if it has no more.
func (st *stream) joinFrom(member bool, back int) impl.Position {
	if !member || back <= 0 {
		return st.head
	}
	if back >= len(st.events) {
		return impl.Position{}
	}
	pos := make([]impl.Position, len(st.events))
	for i, e := range st.events {
		pos[i] = e.Pos
	}
	slices.SortFunc(pos, impl.Position.Compare)
	return pos[len(pos)-1-back]
}

// currentlyMember is the bot's membership for events after the head: its
// latest registry entry for the stream.
func (s *sim) currentlyMember(stream, bot string) bool {
	member := false
	for _, m := range s.regMembers {
		if m.Stream == stream && m.Bot == bot {
			member = m.Member
		}
	}
	return member
}

func (s *sim) result() (*Result, error) {
	final := oracle.CheckFinal{}
	var err error
	if final.Messages, err = s.store.ListMessages(s.ctx, ""); err != nil {
		return nil, fmt.Errorf("sim: reading the final queue: %w", err)
	}
	if final.Cursors, err = s.store.ListCursors(s.ctx); err != nil {
		return nil, fmt.Errorf("sim: reading the final cursors: %w", err)
	}
	for _, n := range s.nodes {
		if n.up {
			addCounters(&s.engTotals, n.eng.Counters())
		}
	}
	p := s.checkParams()
	prev := s.enter(StageOracle)
	rep := s.chk.Finish(final)
	s.leave(prev)

	c := s.counters
	c.Events = rep.Stats.Events
	c.Obligations = rep.Stats.Obligations
	c.DeadLetters = rep.Stats.DeadLettered
	c.RetentionDrops = rep.Stats.RetentionDropped
	c.Duplicates += rep.Stats.DuplicateHandlerRuns

	fc := map[faults.Kind]int{}
	for _, k := range faults.All() {
		fc[k] = s.faultCount[k]
	}
	viol := append(rep.Violations, settingsViolations(s.cfg.Seed, s.ecfg, s.now, s.step)...)
	viol = append(viol, receiverViolations(s.cfg.Seed, s.now, s.step)...)
	viol = append(viol, receiverContractViolations(s.cfg.Seed, s.now, s.step)...)
	viol = append(viol, s.counterViolations()...)
	if viol == nil {
		viol = []oracle.Violation{}
	}
	hash, lines := "", len(s.trace)
	prev = s.enter(StageTrace)
	switch {
	case s.cfg.NoTrace:
		lines = s.untraced
	case s.th != nil:
		hash, lines = s.th.sum(), s.th.lines
	default:
		hash = HashTrace(s.trace)
	}
	s.enter(StageCoverage)
	cov := s.cov.finish(rep.Stats)
	s.leave(prev)
	return &Result{
		Seed: s.cfg.Seed, Workload: s.w, Plan: s.plan,
		Trace: s.trace, TraceHash: hash, TraceLines: lines,
		Counters: c, Faults: fc, Fired: s.fired, Unfired: s.sched.Unfired(), Violations: viol, Stats: rep.Stats,
		Engine: s.engTotals, Params: p, HealAt: s.healAt, End: s.now, Quiescent: s.quiescent,
		Coverage: cov, Payloads: s.payloads, Produced: s.produced,
	}, nil
}

func (s *sim) checkParams() oracle.CheckParams {
	p := bounds.Of(s.ecfg)
	p.DedupWindow = s.w.ReceiverWindow
	p.ReceiverTolerance = s.rxTolerance()
	p.DedupMaxEntries = s.w.ReceiverEntries
	if !s.cfg.Bugs.NoReceiverDedup {
		p.ExactDedup = map[string]string{}
		for _, b := range s.bots {
			p.ExactDedup[b.spec.ID] = oracle.DedupMemory
			if b.durable {
				p.ExactDedup[b.spec.ID] = oracle.DedupDurable
			}
		}
	}
	p.LivenessBound = s.w.Liveness
	if s.w.HOLBound > 0 {
		p.HOLBound = s.w.HOLBound
	}
	p.HealthyBots = s.healthy
	return p
}

func addCounters(dst *engine.Counters, c engine.Counters) {
	dst.Enqueued += c.Enqueued
	dst.Sent += c.Sent
	dst.Acked += c.Acked
	dst.Failed += c.Failed
	dst.DeadLettered += c.DeadLettered
	dst.Requeued += c.Requeued
	dst.RetentionTTL += c.RetentionTTL
	dst.RetentionCap += c.RetentionCap
	dst.BreakerOpened += c.BreakerOpened
	dst.StoreErrors += c.StoreErrors
	dst.CursorWrites += c.CursorWrites
	dst.SentDirect += c.SentDirect
	dst.Delivered += c.Delivered
}

func posString(p impl.Position) string {
	return string(appendPos(make([]byte, 0, 24+len(p.ID)), p))
}

// appendPos appends posString(p): "major.minor" or "major.minor.id", in
// strconv appends rather than fmt (positions are formatted for every
// batch, note and trace line that names one).
func appendPos(b []byte, p impl.Position) []byte {
	b = strconv.AppendInt(b, p.Major, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, p.Minor, 10)
	if p.ID != "" {
		b = append(b, '.')
		b = append(b, p.ID...)
	}
	return b
}

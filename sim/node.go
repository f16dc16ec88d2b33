package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// node is one engine process. Its memory (the Engine) is thrown away on a
// crash; its store is shared with every other node.
type node struct {
	s    *sim
	idx  int
	name string

	eng *engine.Engine
	up  bool
	inc int // incarnation: bumps on every boot; stale callbacks compare it
	// spent is the engine's last Ready, applied and finished with, handed
	// back through Recycle after the next Step (before that step's Ready),
	// so the engine then already holds newer effects: the contract a
	// runtime that applies effects in the background meets (Recycle may
	// come at any time after the Ready is finished with; reuse must keep
	// whatever the engine produced since). spentEng is the incarnation's
	// engine it came from.
	spent    engine.Ready
	spentEng *engine.Engine

	// The node's clock: virtual time, plus offset, plus ppm parts per
	// million of the time since boot (integer arithmetic, so no platform
	// rounding differences).
	offset time.Duration
	ppm    int64
	bootAt time.Time
	// bootOffset: the offset this incarnation booted with (a clock jump
	// keeps within it, or within the jump bound if that is larger).
	bootOffset time.Duration
	// fwd: how far this incarnation's clock was stepped forward in all.
	fwd time.Duration

	frng *rand.Rand // fault decisions: crashes, clock draws
	// restartAfter, when set by a scheduled crash, replaces the drawn
	// restart delay of the next crash.
	restartAfter time.Duration

	// ords numbers the node's steps, crash-point visits and store calls
	// within one instant, so a fault can name exactly which one it hit.
	ords  ordCounter
	ord   int          // the ordinal of the store call in progress
	rrng  *rand.Rand   // restart delays
	crng  *rand.Rand   // async cursor-write delays
	srng  *rand.Rand   // store fault rolls
	held  []heldResult // answers waiting for the next batch (Workload.ResultBatch)
	store impl.Store   // what the engine talks to: the shared store, observed, behind the node's store faults
	// crashed is the index in sim.fired of the crash fault that is taking
	// the node down (-1: none), so crash can record its restart delay.
	crashed int
	// crashChosen: the CrashHook answered true during the current Step; the
	// engine's contract (engine.Step) is then to die and return ErrCrashed.
	crashChosen bool

	// cursorsOpen counts this incarnation's async cursor writes not yet landed.
	cursorsOpen int

	// What this incarnation did, as the world saw it, for reported-counters
	// (counters.go): told is what its store calls answered it and what
	// it sent; pend is the store call in progress, booked into told once
	// the call's answer reaches the engine unchanged.
	told, pend engine.Counters
	// pendTold: the cursors of the store call in progress, told to the
	// engine as durable once its answer reaches it unchanged
	// (cursor-monotonic: ObsCursorTold). asyncWrite: an async cursor write
	// is in progress (its request was observed when the engine made it,
	// and it counts as a cursor write once done, written or not).
	pendTold   []impl.Cursor
	asyncWrite bool
	// directReq: this incarnation's requests sent from no row it holds (by
	// the engine's request id); snapOK: 2xx answers it was told for
	// snapshot changes (reported-counters: acked, delivered).
	directReq map[uint64]bool
	snapOK    int
	// snapErrs: its RecordDelivered calls answered with an error (a
	// snapshot 2xx whose recording failed is not counted acked);
	// snapFailed: failed answers it was told per snapshot change
	// (app, webhook-id) (reported-counters: acked, dead_lettered).
	snapErrs   int
	snapFailed map[impl.MessageKey]int
	// leased: rows this incarnation was told it claimed or inserted
	// leased to itself and has not sent yet, each with the engine's count
	// of sends when the store told it (a send of the key the engine made
	// before that, earlier in the same step, is a direct one: seed 8726,
	// a direct hand-off and a claim of another node's row of the same key
	// in one step); pendLeased: those of the
	// store call in progress, booked once its answer reaches the engine;
	// pendUnleased: the rows of that call's Fail or Ack, which end a lease
	// it holds (a claimed row whose failure it records instead of sending).
	leased       map[impl.MessageKey]int
	pendLeased   []impl.MessageKey
	pendUnleased []impl.MessageKey
	sentKeys     map[impl.MessageKey]int // requests per (bot, event)
	failTold     int                     // failed answers told
	failSure     int                     // of them, to a message sent once
	// notedDead, notedOpen, notedErrs: the dead letters, breaker openings
	// and store errors its notes reported (the runtime's per-bot
	// dead-letter counter and breaker gauge are made of its notes, and it
	// logs each store error noted).
	notedDead, notedOpen, notedErrs int
}

type nodeClock struct{ n *node }

func (c nodeClock) Now() time.Time { return c.n.engineTime(c.n.s.now) }

func (n *node) engineTime(v time.Time) time.Time {
	el := v.Sub(n.bootAt)
	return v.Add(addSat(n.offset, scalePPM(el, n.ppm)))
}

// virtualTime is the first virtual instant at which the node's clock reads
// at least t.
func (n *node) virtualTime(t time.Time) time.Time {
	// Solve v + offset + (v-boot)*ppm/1e6 >= t for v: the smallest el with
	// f(el) >= target, f being nondecreasing because |ppm| < 1e6 (the plan
	// and schedule bound it). A floating-point estimate starts a galloping
	// search, then bisection settles it exactly, in at most about 130
	// evaluations whatever the drift (stepping one nanosecond at a time
	// spun for ever on a clock that nearly stands still).
	target := addSat(t.Sub(n.bootAt), -n.offset)
	f := func(d time.Duration) time.Duration { return addSat(d, scalePPM(d, n.ppm)) }
	est := float64(target) / (1 + float64(n.ppm)/1e6)
	var el time.Duration
	switch {
	case est >= math.MaxInt64:
		el = math.MaxInt64
	case est <= math.MinInt64:
		el = math.MinInt64
	default:
		el = time.Duration(est)
	}
	// lo: f(lo) < target (or the int64 floor); hi: f(hi) >= target (or the
	// int64 ceiling, the answer when the clock never gets there).
	lo, hi := el, el
	if f(el) >= target {
		for step := time.Duration(1); f(lo) >= target && lo > math.MinInt64; step = grow(step) {
			hi, lo = lo, addSat(lo, -step)
		}
		if f(lo) >= target {
			return n.bootAt.Add(lo)
		}
	} else {
		for step := time.Duration(1); f(hi) < target && hi < math.MaxInt64; step = grow(step) {
			lo, hi = hi, addSat(hi, step)
		}
		if f(hi) < target {
			return n.bootAt.Add(hi)
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if f(mid) >= target {
			hi = mid
		} else {
			lo = mid
		}
	}
	return n.bootAt.Add(hi)
}

func (s *sim) newNode(i int) *node {
	name := fmt.Sprintf("node-%d", i+1)
	// Restart and cursor-write delays have streams of their own, so a run
	// rewritten with an explicit fault schedule (which rolls no dice) draws
	// the same delays as the random run it came from.
	n := &node{s: s, idx: i, name: name,
		frng: s.actorRand("node/" + name + "/faults"),
		rrng: s.actorRand("node/" + name + "/restart"),
		crng: s.actorRand("node/" + name + "/cursor"),
	}
	n.srng = s.actorRand("node/" + name + "/store")
	n.crashed = -1
	// The wrappers forward EnqueueLeased; impl.AsLeasingEnqueuer looks
	// through them (impl.Wrapper), so a backend without it still looks so
	// to the engine, which then hands off by Enqueue and Claim alone.
	n.store = faults.NewStore(&observedStore{s: s, n: n, inner: s.store}, storeFaults{n})
	return n
}

// boot starts a new incarnation: a fresh Engine on the shared store, fed
// Start with the whole registry.
func (s *sim) boot(n *node) {
	if n.up {
		return
	}
	n.inc++
	n.bootAt, n.offset, n.ppm = s.now, 0, 0
	n.cursorsOpen = 0
	n.told, n.pend, n.sentKeys, n.failTold, n.failSure = engine.Counters{}, engine.Counters{}, map[impl.MessageKey]int{}, 0, 0
	n.directReq, n.snapOK, n.leased = map[uint64]bool{}, 0, map[impl.MessageKey]int{}
	n.snapErrs, n.snapFailed = 0, map[impl.MessageKey]int{}
	n.notedDead, n.notedOpen, n.notedErrs = 0, 0, 0
	// Drawn clocks first (the random stream is consumed at every boot of
	// the fault window), then the explicit schedule, which overrides them.
	clock := func(k faults.Kind) faults.Site {
		return faults.Site{Kind: k, At: s.elapsed(), Ord: faults.NoOrd, Node: n.name, Incarnation: n.inc}
	}
	fired := func(k faults.Kind) faults.Fault { return faults.Fault{Kind: k, Node: n.name, Incarnation: n.inc} }
	if c, ok := s.drawnClock(clock(faults.ClockOffset)); ok {
		if n.offset = between(n.frng, -c.Max, c.Max); n.offset != 0 {
			f := fired(faults.ClockOffset)
			f.Offset = n.offset
			s.inject(f, false, n.name, "offset", n.offset, "incarnation", n.inc)
		}
	}
	if c, ok := s.drawnClock(clock(faults.ClockDrift)); ok {
		maxPPM := int64(c.Max) * 1_000_000 / int64(time.Hour)
		if n.ppm = n.frng.Int64N(2*maxPPM+1) - maxPPM; n.ppm != 0 {
			f := fired(faults.ClockDrift)
			f.PPM = n.ppm
			s.inject(f, false, n.name, "ppm", n.ppm, "incarnation", n.inc)
		}
	}
	for _, f := range s.sched.Faults() {
		if (f.Kind != faults.ClockOffset && f.Kind != faults.ClockDrift) || !f.Matches(clock(f.Kind)) || s.elapsed() < f.At {
			continue
		}
		g := fired(f.Kind)
		if f.Kind == faults.ClockOffset {
			n.offset, g.Offset = f.Offset, f.Offset
			s.inject(g, true, n.name, "offset", n.offset, "incarnation", n.inc)
		} else {
			n.ppm, g.PPM = f.PPM, f.PPM
			s.inject(g, true, n.name, "ppm", n.ppm, "incarnation", n.inc)
		}
	}
	n.bootOffset, n.fwd = n.offset, 0
	cfg := s.ecfg
	cfg.Bugs = s.engineBugs()
	cfg.Node = n.name
	cfg.Clock = nodeClock{n}
	cfg.Rand = s.actorRand(fmt.Sprintf("node/%s/engine/%d", n.name, n.inc))
	cfg.CrashHook = func(p engine.CrashPoint) bool {
		k, ok := crashKind(p)
		if !ok {
			return false
		}
		ord := n.ordinal("point", string(p))
		site := faults.Site{Kind: k, At: s.elapsed(), Ord: ord, Node: n.name}
		f, scheduled := s.sched.Take(site)
		if !scheduled {
			if _, ok := s.chance(site, n.frng); !ok {
				return false
			}
		}
		s.crashFault(n, f, scheduled, faults.Fault{Kind: k, At: site.At, Node: n.name, Call: ord}, "point", string(p), "call", ord)
		n.crashChosen = true
		return true
	}
	eng, err := engine.New(cfg, n.store)
	if err != nil {
		s.fatal = fmt.Errorf("sim: building engine for %s: %w", n.name, err)
		return
	}
	n.eng, n.up = eng, true
	s.rec(n.name, "boot", "incarnation", n.inc, "clock", nodeClock{n}.Now())
	s.observe(oracle.Observation{Kind: oracle.ObsNodeUp, Node: n.name, Clock: nodeClock{n}.Now()})
	s.stepNode(n, engine.Start{Registry: s.registry()}, "start")
	s.sourcesAfterBoot()
}

// crash kills the node: memory, subscriptions, in-flight callbacks and
// pending async cursor writes are gone; the store keeps what was written.
func (s *sim) crash(n *node, why string) {
	if !n.up {
		return
	}
	addCounters(&s.engTotals, n.eng.Counters())
	n.up, n.eng = false, nil
	s.counters.Crashes++
	for _, st := range s.streams {
		st.subs[n.idx] = nil
	}
	delay := between(n.rrng, s.w.RestartMin, s.w.RestartMax)
	if n.restartAfter > 0 {
		delay = n.restartAfter
	}
	n.restartAfter = 0
	if n.crashed >= 0 {
		s.fired[n.crashed].RestartAfter = delay
		n.crashed = -1
	}
	s.rec(n.name, "crash", "why", why, "restart_in", delay)
	s.observe(oracle.Observation{Kind: oracle.ObsNodeDown, Node: n.name})
	s.after(delay, func() { s.boot(n) })
	s.sourcesAfterCrash()
}

// stepNode feeds one input to a live node and carries out its effects,
// unless the node crashes at a crash point or (the crash fault) right after
// the step, losing them.
func (s *sim) stepNode(n *node, in engine.Input, what string) {
	if !n.up {
		return
	}
	stepOrd := n.ordinal("step", "")
	n.crashChosen = false
	prev := s.enter(StageEngine)
	err := n.eng.Step(in)
	s.leave(prev)
	if errors.Is(err, engine.ErrCrashed) {
		s.crash(n, "crash-point")
		return
	}
	if n.crashChosen {
		// The hook chose a crash point and the engine went on: the fault
		// plan's crash never happened, so the run would judge a world
		// other than the one it reports (and an engine that ignores its
		// hook cannot be told apart from one that survived the point).
		s.fatal = fmt.Errorf("sim: node %s (incarnation %d): its CrashHook chose a crash point during a %s step, but Step returned %v instead of engine.ErrCrashed", n.name, n.inc, what, err)
		s.crash(n, "crash-point")
		return
	}
	if err != nil {
		s.counters.EngineErrors++
		s.rec(n.name, "step-error", "input", what, "err", err.Error())
		s.crash(n, "step-error")
		return
	}
	if n.spentEng == n.eng {
		n.eng.Recycle(n.spent)
	}
	n.spent, n.spentEng = engine.Ready{}, nil
	r := n.eng.Ready()
	site := faults.Site{Kind: faults.Crash, At: s.elapsed(), Ord: stepOrd, Node: n.name, After: what}
	f, scheduled := s.sched.Take(site)
	if !scheduled {
		if _, ok := s.chance(site, n.frng); !ok {
			eng := n.eng
			s.apply(n, r)
			if n.eng == eng { // still the same incarnation: r is spent
				n.spent, n.spentEng = r, eng
			}
			return
		}
	}
	s.crashFault(n, f, scheduled, faults.Fault{Kind: faults.Crash, At: site.At, Node: n.name, After: what, Call: stepOrd},
		"after", what, "call", stepOrd)
	s.crash(n, "crash")
}

// crashFault records a crash fault (f is the explicit one, if scheduled;
// g is where it hit) and readies the restart delay: an explicit crash's
// own (0: 1s), else the drawn one.
func (s *sim) crashFault(n *node, f faults.Fault, scheduled bool, g faults.Fault, fields ...any) {
	if scheduled {
		n.restartAfter = cmp.Or(f.RestartAfter, time.Second)
	}
	n.crashed = s.inject(g, scheduled, n.name, fields...)
	s.cov.crash(n, g.Kind)
}

// storeFaults decides a node's store faults (faults.Injector): the
// explicit schedule before the call, then the drawn chance; after a
// committed write the drawn chance, then the explicit schedule.
type storeFaults struct{ n *node }

func (sf storeFaults) site(k faults.Kind, method string) faults.Site {
	n := sf.n
	return faults.Site{Kind: k, At: n.s.elapsed(), Ord: n.ord, Node: n.name, Method: method}
}

func (sf storeFaults) Before(method string) (faults.Kind, bool) {
	n := sf.n
	if n.crashChosen && n.s.fatal == nil {
		// The process died at the crash point: nothing after it reaches
		// the store. An engine that goes on calling (a done marker written
		// after the point, say) would be judged on writes no crashed
		// process makes.
		n.s.fatal = fmt.Errorf("sim: node %s (incarnation %d): store call %s after its CrashHook chose a crash point; the engine must stop at the point and return engine.ErrCrashed", n.name, n.inc, method)
	}
	// Number the call within its instant (see node.ordinal).
	n.ord = n.ordinal("call", method)
	// The key lists keep their arrays: they are read only before the next
	// reset, and a call per store write made them a sweep's busiest appends.
	n.pend, n.pendTold, n.pendLeased, n.pendUnleased = engine.Counters{}, nil, n.pendLeased[:0], n.pendUnleased[:0]
	site := sf.site(faults.StoreError, method)
	if _, ok := n.s.sched.Take(site); ok {
		n.told.StoreErrors++
		return sf.hit(site, true)
	}
	if _, ok := n.s.chance(site, n.srng); ok {
		n.told.StoreErrors++
		return sf.hit(site, false)
	}
	return "", false
}

func (sf storeFaults) After(method string) (faults.Kind, bool) {
	n := sf.n
	site := sf.site(faults.StoreAmbiguous, method)
	_, drawn := n.s.chance(site, n.srng)
	scheduled := false
	if !drawn {
		_, scheduled = n.s.sched.Take(site)
	}
	if drawn || scheduled {
		n.told.StoreErrors++ // the write's effects are not what it is told
		sf.unleaseCommitted()
		return sf.hit(site, scheduled)
	}
	addCounters(&n.told, n.pend)
	n.pend = engine.Counters{}
	n.s.toldCursors(n, n.pendTold)
	n.pendTold = nil
	for _, k := range n.pendUnleased { // before the leases: a hand-off acks, then enqueues
		delete(n.leased, k)
	}
	n.pendUnleased = n.pendUnleased[:0]
	sent := 0
	if n.eng != nil {
		sent = n.eng.Counters().Sent
	}
	for _, k := range n.pendLeased {
		n.leased[k] = sent
	}
	n.pendLeased = n.pendLeased[:0]
	return "", false
}

// unleaseCommitted: an Ack or Fail whose commit acknowledgement is lost
// still ended the leases it names, and the node, which called it, no
// longer sends from them; a later direct send of the key is a direct one
// (seed 19593: an ambiguous Fail left its row booked as leased, and a
// replayed arrival's direct send hours later was counted as sent from it:
// reported-counters sent_direct one short).
func (sf storeFaults) unleaseCommitted() {
	for _, k := range sf.n.pendUnleased {
		delete(sf.n.leased, k)
	}
	sf.n.pendUnleased = sf.n.pendUnleased[:0]
}

func (sf storeFaults) hit(site faults.Site, scheduled bool) (faults.Kind, bool) {
	n, s := sf.n, sf.n.s
	if site.Method == "RecordDelivered" {
		n.snapErrs++
	}
	s.inject(faults.Fault{Kind: site.Kind, At: site.At, Node: n.name, Method: site.Method, Call: n.ord}, scheduled,
		n.name, "method", site.Method, "call", n.ord)
	s.activity++
	s.observe(oracle.Observation{Kind: oracle.ObsStoreFault, Node: n.name, Method: site.Method, Ambiguous: site.Kind == faults.StoreAmbiguous})
	return site.Kind, true
}

func (s *sim) apply(n *node, r engine.Ready) {
	for i := range r.Notes {
		nt := &r.Notes[i]
		s.recNote(n.name, nt)
		switch {
		case nt.Kind == "dead":
			n.notedDead++
		case nt.Kind == "breaker":
			if to, _ := engine.BreakerMovedTo(nt.Detail); to == "open" {
				n.notedOpen++
			}
		case nt.Kind == "store-error":
			n.notedErrs++
		}
	}
	for _, sub := range r.Subscribes {
		s.subscribe(n, sub)
	}
	for _, sd := range r.Sends {
		s.send(n, sd)
	}
	for _, t := range r.Timers {
		s.timer(n, t)
	}
	for _, cw := range r.CursorWrites {
		s.askCursors(n, []impl.Cursor{cw.Cursor})
		s.cursorWrite(n, cw)
	}
}

// recNote traces an engine note. A hash-only run formats it straight into
// the hash, as rec would, without boxing its seven fields: notes are the
// most frequent records (one per store write).
func (s *sim) recNote(actor string, nt *engine.Note) {
	if s.cfg.NoTrace {
		s.untraced++
		return
	}
	if s.th == nil {
		s.rec(actor, "note", "kind", nt.Kind, "bot", nt.Bot, "event", nt.EventID, "stream", nt.Stream,
			"pos", posString(nt.Pos), "count", nt.Count, "detail", nt.Detail)
		return
	}
	prev := s.enter(StageTrace)
	th := s.th
	b := appendHead(th.buf, s.step, s.now, actor, "note")
	b = appendKV(b, "kind", nt.Kind)
	b = appendKV(b, "bot", nt.Bot)
	b = appendKV(b, "event", nt.EventID)
	b = appendKV(b, "stream", nt.Stream)
	b = appendKV(b, "pos", posString(nt.Pos))
	b = strconv.AppendInt(append(b, " count="...), int64(nt.Count), 10)
	th.buf = appendKV(b, "detail", nt.Detail)
	th.endLine()
	s.leave(prev)
}

func (s *sim) timer(n *node, t engine.Timer) {
	inc := n.inc
	s.at(n.virtualTime(t.At), func() {
		if n.inc != inc || !n.up {
			return
		}
		s.rec(n.name, "timer", "id", t.ID)
		s.stepNode(n, engine.TimerFired{TimerID: t.ID}, "timer")
	})
}

// cursorWrite performs an async cursor write after a delay, unless the
// node dies first (the write is then lost, as seed 000's goroutine would be).
func (s *sim) cursorWrite(n *node, cw engine.CursorWrite) {
	inc := n.inc
	delay := between(n.crng, 0, s.w.CursorWriteMax)
	s.pendingCursor++
	n.cursorsOpen++
	s.after(delay, func() {
		s.pendingCursor--
		if n.inc == inc {
			n.cursorsOpen--
		}
		if n.inc != inc || !n.up {
			s.rec(n.name, "cursor-write-lost", "id", cw.WriteID, "stream", cw.Cursor.Key.Stream)
			return
		}
		var err error
		if bw, ok := impl.AsBlindCursorWriter(n.store); cw.Blind && ok {
			err = bw.PutCursorBlind(s.ctx, cw.Cursor)
		} else if cw.Blind {
			err = fmt.Errorf("sim: the %T backend has no blind cursor write (impl.BlindCursorWriter)", s.store)
		} else {
			n.asyncWrite = true
			_, err = n.store.AdvanceCursors(s.ctx, []impl.Cursor{cw.Cursor})
			n.asyncWrite = false
		}
		if err == nil {
			n.told.CursorWrites++ // done, whether or not the store had newer
		}
		if !s.skipRec() {
			errS := ""
			if err != nil {
				errS = err.Error()
			}
			s.rec(n.name, "cursor-write", "id", cw.WriteID, "stream", cw.Cursor.Key.Stream,
				"pos", posString(cw.Cursor.Pos), "blind", cw.Blind, "err", errS)
		}
		s.stepNode(n, engine.CursorWriteDone{WriteID: cw.WriteID, Err: err}, "cursor-write-done")
	})
}

// askCursors observes a node asking for cursor writes (cursor-monotonic).
func (s *sim) askCursors(n *node, cs []impl.Cursor) {
	for _, c := range cs {
		s.observe(oracle.Observation{Kind: oracle.ObsCursorAsk, Node: n.name, Cursor: c})
	}
}

// toldCursors observes a store answer that tells the node each cursor's
// key is durable at or past it: a conditional write that succeeded.
func (s *sim) toldCursors(n *node, cs []impl.Cursor) {
	for _, c := range cs {
		s.observe(oracle.Observation{Kind: oracle.ObsCursorTold, Node: n.name, Cursor: c})
	}
}

// ordinal returns how many times key happened on this node earlier in the
// current instant, and counts this one.
func (n *node) ordinal(class, name string) int { return n.ords.next(n.s.now, class, name) }

// ordCounter counts (class, name) keys within one instant: ordinal runs
// before every store call, step and crash point. An instant sees few
// distinct keys, so they are a slice scanned in place (the names are
// mostly the same constant strings, compared by pointer first), cleared
// rather than remade at each new instant: a map keyed by the two strings
// hashed both on every call.
type ordCounter struct {
	at     time.Time
	counts []ordCount
}

type ordCount struct {
	key ordKey
	n   int
}

// next returns how many times (class, name) was counted earlier in the
// instant now, and counts this one.
func (c *ordCounter) next(now time.Time, class, name string) int {
	if !c.at.Equal(now) {
		c.at = now
		c.counts = c.counts[:0]
	}
	for i := range c.counts {
		if e := &c.counts[i]; e.key.name == name && e.key.class == class {
			e.n++
			return e.n - 1
		}
	}
	c.counts = append(c.counts, ordCount{ordKey{class, name}, 1})
	return 0
}

// ordKey is what node.ordinal counts: a class ("call", "point", "step")
// and a name within it.
type ordKey struct{ class, name string }

// crashKind maps an engine crash point to its fault kind. It lives here,
// not in faults, so that faults (the fault vocabulary a real-process
// harness also speaks) does not depend on the engine.
func crashKind(p engine.CrashPoint) (faults.Kind, bool) {
	switch p {
	case engine.CrashAfterStoreWriteBeforeSend:
		return faults.CrashAfterStoreWrite, true
	case engine.CrashAfterSendBeforeAck:
		return faults.CrashAfterSend, true
	case engine.CrashAfterProcessBeforeCursor:
		return faults.CrashAfterProcess, true
	}
	return "", false
}

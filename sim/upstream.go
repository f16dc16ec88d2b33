package sim

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// stream is one upstream. Log streams put events in a minipool that is
// sealed into numbered miniblocks; an event's position is (miniblock, index)
// where the minipool is miniblock "last sealed + 1". Timestamp streams let
// producers with skewed clocks stamp created_at; positions are
// (created_at ms, 0, id).
type stream struct {
	spec  StreamSpec
	actor string     // "upstream/<name>", built once: every produce and flush names it
	rng   *rand.Rand // event content
	lrng  *rand.Rand // delivery latency
	frng  *rand.Rand // duplicate / reorder faults
	crng  *rand.Rand // corner-case inputs (its own stream: a world without corners draws as before)
	large int        // large payloads produced so far

	events  []engine.Event // in production (arrival) order
	ids     map[string]bool
	sealed  int64
	openIdx int64
	head    impl.Position // greatest position produced (zero before any)

	subs []*subscription // per node index; nil = not subscribed
}

// subscription is one node's live sync of a stream. Events before liveFrom
// (the stream's length when it subscribed) are a replay and pass through
// the filter; later ones are live and always delivered.
type subscription struct {
	n        *node
	inc      int
	next     int
	liveFrom int
	filter   func(engine.Event) bool
	flushing bool
}

func (s *sim) setupStreams() {
	for _, spec := range s.w.Streams {
		st := &stream{
			spec:  spec,
			actor: "upstream/" + spec.Name,
			rng:   s.actorRand("upstream/" + spec.Name),
			lrng:  s.actorRand("upstream/" + spec.Name + "/latency"),
			frng:  s.actorRand("upstream/" + spec.Name + "/faults"),
			crng:  s.actorRand("upstream/" + spec.Name + "/corners"),
			ids:   map[string]bool{},
			// Miniblocks sealed before the run began.
			sealed: spec.FirstMiniblock,
			subs:   make([]*subscription, s.w.Nodes),
		}
		s.streams = append(s.streams, st)
		s.byStream[spec.Name] = st
	}
	for _, m := range s.w.Members {
		st := s.byStream[m.Stream]
		s.addMembership(engine.Membership{Stream: m.Stream, Kind: st.spec.Kind, Bot: m.Bot, Member: true}, false)
	}
}

// scheduleProduction spreads the stream's events over [1s, Produce] and,
// for log streams, seals the minipool periodically until production ends.
func (s *sim) scheduleProduction(st *stream) {
	if st.spec.ExplicitEvents {
		for i := range st.spec.Explicit {
			spec := &st.spec.Explicit[i]
			s.at(Epoch.Add(spec.At), func() { s.produce(st, spec) })
		}
	} else {
		times := make([]time.Duration, st.spec.Events)
		for i := range times {
			times[i] = between(st.rng, time.Second, s.w.Produce)
			// drawAligned: every third event on the grid. All of them
			// would pile a minute's events of every stream into one
			// instant, a backlog that alone outlasts the head-of-line
			// bound (seeds 2197, 7269, 9809 with a grid of 1-3 min).
			if g := s.w.Grid; g > 0 && i%3 == 0 {
				times[i] = max(g, times[i]/g*g)
			}
		}
		if s.w.Fanout > 0 && len(times) > 0 {
			times[0] = s.w.Fanout // drawWide: every stream at one instant
		}
		slices.Sort(times)
		cornerTimes(st.crng, &s.w, &st.spec, times)
		for _, d := range times {
			s.at(Epoch.Add(d), func() { s.produce(st, nil) })
		}
	}
	if st.spec.Kind == engine.LogStream {
		var seal func()
		seal = func() {
			if st.openIdx > 0 {
				st.sealed++
				st.openIdx = 0
				s.rec(st.actor, "seal", "miniblock", st.sealed)
			}
			if s.now.Before(Epoch.Add(s.w.Produce)) {
				s.after(st.spec.SealEvery, seal)
			}
		}
		s.after(st.spec.SealEvery, seal)
	}
}

// produce appends one event: drawn from the stream's random stream, or,
// for an explicit workload, as spec says.
func (s *sim) produce(st *stream, spec *EventSpec) {
	seq := len(st.events) + 1
	var id string
	var payload []byte
	if spec != nil {
		id, payload = spec.ID, spec.Payload
		explicitPayload := payload != nil
		if id == "" {
			id = fmt.Sprintf("%s-%d", st.spec.Name, seq)
		}
		if st.ids[id] {
			// Only a generated id can collide with an explicit one.
			id = fmt.Sprintf("%s-%d-%d", st.spec.Name, seq, len(st.ids))
		}
		if payload == nil {
			payload = fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q}`, st.spec.Name, seq, id)
		}
		if explicitPayload {
			s.payloads[id] = payload
		}
	} else {
		for id == "" || st.ids[id] || s.cids.used[id] {
			var b [6]byte
			for i := range b {
				b[i] = byte(st.rng.Uint32())
			}
			var txt [len("ev-") + 2*len(b)]byte // "ev-" + hex, one allocation
			copy(txt[:], "ev-")
			hex.Encode(txt[len("ev-"):], b[:])
			id = string(txt[:])
		}
		var data [8]byte
		for i := range data {
			data[i] = byte(st.rng.Uint32())
		}
		if s.w.Corners != 0 {
			if c := s.cids.next(st.crng, &s.w); c != "" && !st.ids[c] {
				id = c
			}
		}
		payload = drawnPayload(st.spec.Name, seq, id, data)
		if s.w.Corners != 0 {
			if p := cornerPayload(st.crng, &s.w, st, seq, id); p != nil {
				payload = p
				s.payloads[id] = p
			}
		}
	}
	s.cids.used[id] = true
	st.ids[id] = true
	ev := engine.Event{ID: id, Stream: st.spec.Name, Payload: payload}
	producer, pidx := "", 0
	if st.spec.Kind == engine.LogStream {
		ev.Pos = impl.Position{Major: st.sealed + 1, Minor: st.openIdx}
		st.openIdx++
		ev.CreatedAt = s.now
	} else {
		var p int
		if spec != nil {
			p = spec.Producer
		} else {
			p = st.rng.IntN(len(st.spec.ProducerSkews))
		}
		producer, pidx = fmt.Sprint(p), p
		stamp := time.Millisecond
		if st.spec.StampSeconds {
			stamp = time.Second
		}
		ev.CreatedAt = s.now.Add(st.spec.ProducerSkews[p]).Truncate(stamp)
		ev.Pos = impl.Position{Major: ev.CreatedAt.UnixMilli(), ID: id}
	}
	if ev.Pos.Compare(st.head) > 0 {
		st.head = ev.Pos
	}
	st.events = append(st.events, ev)
	s.produced = append(s.produced, ProducedEvent{Stream: st.spec.Name, At: s.now.Sub(Epoch), ID: id, Producer: pidx})
	if t := s.traits.traits(s.now, ev, st.spec.Kind == engine.LogStream); t != 0 {
		s.evTraits[id] = t
	}
	if !s.skipRec() {
		s.rec(st.actor, "produce", "event", id, "pos", posString(ev.Pos), "producer", producer)
	}
	s.observe(oracle.Observation{
		Kind: oracle.ObsProduced, Stream: st.spec.Name, LogStream: st.spec.Kind == engine.LogStream,
		EventID: id, Pos: ev.Pos, Payload: ev.Payload,
	})
	for _, sb := range st.subs {
		if sb != nil {
			s.scheduleFlush(st, sb)
		}
	}
}

// subscribe replaces the node's subscription to the stream.
func (s *sim) subscribe(n *node, sub engine.Subscribe) {
	st := s.byStream[sub.Stream]
	if st == nil {
		s.rec(n.name, "subscribe-unknown", "stream", sub.Stream)
		return
	}
	sb := &subscription{n: n, inc: n.inc, liveFrom: len(st.events)}
	switch {
	case sub.Fresh:
		sb.next = len(st.events)
	case st.spec.Kind == engine.LogStream:
		from := sub.From
		again := s.overlap(st, from)
		sb.filter = func(e engine.Event) bool {
			if e.Pos.Compare(from) > 0 {
				return true
			}
			if again[e.ID] {
				s.cov.hit(CovResumeOverlap)
				return true
			}
			return false
		}
	default:
		since := sub.Since
		sb.filter = func(e engine.Event) bool { return e.Pos.Major >= since }
	}
	st.subs[n.idx] = sb
	s.cov.lookbackEdge(st, sub)
	s.rec(n.name, "subscribe", "stream", sub.Stream, "fresh", sub.Fresh, "from", posString(sub.From), "since", sub.Since)
	s.observe(oracle.Observation{
		Kind: oracle.ObsSubscribe, Node: n.name, Stream: sub.Stream, LogStream: st.spec.Kind == engine.LogStream,
		Pos: sub.From, Since: sub.Since, Fresh: sub.Fresh, Token: sub.Token,
	})
	s.scheduleFlush(st, sb)
}

// overlap names the last Workload.ResumeOverlap events at or before from
// that a resumed subscription serves again (none for a subscription from
// the start: nothing came before it).
func (s *sim) overlap(st *stream, from impl.Position) map[string]bool {
	if s.w.ResumeOverlap <= 0 || from.Compare(impl.Position{}) == 0 {
		return nil
	}
	again := map[string]bool{}
	for i := len(st.events) - 1; i >= 0 && len(again) < s.w.ResumeOverlap; i-- {
		if e := st.events[i]; e.Pos.Compare(from) <= 0 {
			again[e.ID] = true
		}
	}
	return again
}

func (st *stream) current(sb *subscription) bool {
	return st.subs[sb.n.idx] == sb && sb.n.up && sb.n.inc == sb.inc
}

func (s *sim) scheduleFlush(st *stream, sb *subscription) {
	if sb.flushing || sb.next >= len(st.events) {
		return
	}
	sb.flushing = true
	s.pendingFlush++
	s.after(between(st.lrng, st.spec.LatencyMin, st.spec.LatencyMax), func() {
		s.pendingFlush--
		sb.flushing = false
		if st.current(sb) {
			s.flush(st, sb)
		}
	})
}

// flush delivers the next batch of a subscription, maybe reordered, maybe
// to be delivered again later.
func (s *sim) flush(st *stream, sb *subscription) {
	var batch []engine.Event
	for sb.next < len(st.events) && len(batch) < s.w.BatchMax {
		e := st.events[sb.next]
		sb.next++
		if sb.next-1 < sb.liveFrom && sb.filter != nil && !sb.filter(e) {
			continue
		}
		batch = append(batch, e)
	}
	if len(batch) > 0 {
		last := batch[len(batch)-1].Pos
		cookie := appendPos(append(append(make([]byte, 0, len(st.spec.Name)+32+len(last.ID)), st.spec.Name...), '@'), last)
		actor := st.actor
		site := func(k faults.Kind) faults.Site {
			return faults.Site{Kind: k, At: s.elapsed(), Ord: faults.NoOrd, Stream: st.spec.Name, Node: sb.n.name}
		}
		fired := func(k faults.Kind) faults.Fault {
			return faults.Fault{Kind: k, At: s.elapsed(), Stream: st.spec.Name, Node: sb.n.name}
		}
		reordered := false
		if len(batch) > 1 {
			if f, ok := s.sched.Take(site(faults.UpstreamReorder)); ok {
				batch = permute(batch, f.Order)
				g := fired(faults.UpstreamReorder)
				g.Order = shownOrder(f.Order, len(batch))
				s.inject(g, true, actor, "node", sb.n.name, "events", len(batch), "order", orderString(g.Order, len(batch)))
				reordered = true
			}
		}
		// The coin is rolled for every batch, even one of a single event.
		if !reordered {
			if _, ok := s.chance(site(faults.UpstreamReorder), st.frng); ok && len(batch) > 1 {
				// Shuffle positions alongside, so the fault says exactly
				// where each event went.
				idx := make([]int, len(batch))
				for i := range idx {
					idx[i] = i
				}
				st.frng.Shuffle(len(batch), func(i, j int) {
					batch[i], batch[j] = batch[j], batch[i]
					idx[i], idx[j] = idx[j], idx[i]
				})
				order := make([]int, len(idx))
				for j, i := range idx {
					order[i] = j
				}
				g := fired(faults.UpstreamReorder)
				g.Order = order
				s.inject(g, false, actor, "node", sb.n.name, "events", len(batch), "order", orderString(order, len(batch)))
			}
		}
		dup, dupOK, dupSched := fired(faults.UpstreamDuplicate), false, false
		if f, ok := s.sched.Take(site(faults.UpstreamDuplicate)); ok {
			dup.Delay, dupOK, dupSched = max(f.Delay, time.Millisecond), true, true
		} else if c, ok := s.chance(site(faults.UpstreamDuplicate), st.frng); ok {
			dup.Delay, dupOK = between(st.frng, time.Millisecond, max(time.Millisecond, c.Max)), true
		}
		if dupOK {
			again := slices.Clone(batch)
			n, inc := sb.n, sb.inc
			delay := dup.Delay
			s.inject(dup, dupSched, actor, "node", n.name, "events", len(again), "delay", delay)
			s.pendingFlush++
			s.after(delay, func() {
				s.pendingFlush--
				if n.up && n.inc == inc {
					s.deliverBatch(st, n, again, cookie, true)
				}
			})
		}
		s.deliverBatch(st, sb.n, batch, cookie, false)
	}
	if st.current(sb) {
		s.scheduleFlush(st, sb)
	}
}

func (s *sim) deliverBatch(st *stream, n *node, batch []engine.Event, cookie []byte, dup bool) {
	s.counters.Batches++
	s.activity++
	s.rec(st.actor, "batch", "node", n.name, "events", len(batch),
		"first", batch[0].ID, "last", batch[len(batch)-1].ID, "duplicate", dup)
	for _, e := range batch {
		s.observe(oracle.Observation{Kind: oracle.ObsArrived, Node: n.name, Stream: st.spec.Name, EventID: e.ID})
	}
	s.stepNode(n, engine.UpstreamBatch{Stream: st.spec.Name, Kind: st.spec.Kind, Events: batch, Cookie: cookie}, "batch")
}

// shownOrder is the order a reorder of n events names: order itself, or,
// if it has the wrong length, the reversal that permute falls back to.
func shownOrder(order []int, n int) []int {
	if len(order) == n {
		return slices.Clone(order)
	}
	rev := make([]int, n)
	for i := range rev {
		rev[i] = n - 1 - i
	}
	return rev
}

// orderString renders a permutation as "2 0 1".
func orderString(order []int, n int) string {
	order = shownOrder(order, n)
	parts := make([]string, len(order))
	for i, o := range order {
		parts[i] = strconv.Itoa(o)
	}
	return strings.Join(parts, " ")
}

// drawnPayload is a drawn event's payload, the bytes of
// fmt.Appendf(nil, `{"stream":%q,"seq":%d,"id":%q,"data":"%x"}`, stream,
// seq, id, data) built with strconv and hex appends (every event of a run
// has one; TestDrawnPayloadIsFmts holds the two equal).
func drawnPayload(stream string, seq int, id string, data [8]byte) []byte {
	b := make([]byte, 0, len(`{"stream":,"seq":,"id":,"data":""}`)+len(stream)+len(id)+4+20+2*len(data))
	b = append(b, `{"stream":`...)
	b = strconv.AppendQuote(b, stream)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"data":"`...)
	b = hex.AppendEncode(b, data[:])
	return append(b, `"}`...)
}

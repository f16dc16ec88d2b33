package chaos

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// node is the name every engine incarnation has in the observations: the
// checker sees one node that goes down (SIGKILL) and comes back.
const node = "engine"

type key struct{ bot, event string }

type produced struct {
	stream string
	log    bool
	pos    impl.Position
	at     time.Time
}

type memb struct {
	bot    string
	from   impl.Position
	member bool
}

// recorder turns what the harness observed into the checker's
// observations, in the order it observed them, and keeps the counts the
// report shows. Everything is under one lock, so the observation order is
// a real order: a request a bot received is recorded after the production
// of its event (the producer records under the same lock).
type recorder struct {
	mu   sync.Mutex
	chk  *oracle.Checker
	step int64

	events  map[string]produced
	order   []string // production order
	streams map[string][]memb
	bots    []string

	requests     map[key]int
	handlerRuns  map[key]int
	firstHandled map[key]time.Time
	latencies    []time.Duration
	okResults    int
	rejections   int
	rejectDetail []string
	dups         int
	harnessErrs  []string

	seenRows map[key]bool // queue rows the store observer reported
	deadRows map[key]bool
	cursors  map[impl.CursorKey]impl.Position
}

func newRecorder(p oracle.CheckParams) *recorder {
	return &recorder{
		chk: oracle.NewChecker(p), events: map[string]produced{}, streams: map[string][]memb{},
		requests: map[key]int{}, handlerRuns: map[key]int{}, firstHandled: map[key]time.Time{},
		seenRows: map[key]bool{}, deadRows: map[key]bool{}, cursors: map[impl.CursorKey]impl.Position{},
	}
}

// obsLocked stamps and feeds one observation; r.mu is held.
func (r *recorder) obsLocked(o oracle.Observation) {
	r.step++
	o.Step, o.Time = r.step, time.Now()
	if o.Node == "" && (o.Kind == oracle.ObsSend || o.Kind == oracle.ObsResult || o.Kind == oracle.ObsArrived ||
		o.Kind == oracle.ObsNodeUp || o.Kind == oracle.ObsNodeDown || o.Kind == oracle.ObsStoreFault || o.Kind == oracle.ObsCursor) {
		o.Node = node
	}
	r.chk.Observe(&o)
}

func (r *recorder) obs(o oracle.Observation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.obsLocked(o)
}

// producedLocked records an event the upstream now holds.
func (r *recorder) producedLocked(stream string, log bool, id string, pos impl.Position, payload []byte) {
	r.events[id] = produced{stream: stream, log: log, pos: pos, at: time.Now()}
	r.order = append(r.order, id)
	r.obsLocked(oracle.Observation{Kind: oracle.ObsProduced, Stream: stream, LogStream: log, EventID: id, Pos: pos, Payload: payload})
}

func (r *recorder) membershipLocked(stream string, log bool, bot string, from impl.Position, member bool) {
	r.streams[stream] = append(r.streams[stream], memb{bot: bot, from: from, member: member})
	if !slices.Contains(r.bots, bot) {
		r.bots = append(r.bots, bot)
		sort.Strings(r.bots)
	}
	r.obsLocked(oracle.Observation{Kind: oracle.ObsMembership, Stream: stream, LogStream: log, Bot: bot, Pos: from, Member: member})
}

func (r *recorder) arrived(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.obsLocked(oracle.Observation{Kind: oracle.ObsArrived, EventID: id})
	}
}

// send: a request reached a bot's server.
func (r *recorder) send(bot, id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests[key{bot, id}]++
	e := r.events[id]
	r.obsLocked(oracle.Observation{Kind: oracle.ObsSend, Bot: bot, EventID: id, Stream: e.stream, Pos: e.pos, Payload: body})
}

func (r *recorder) handled(bot, id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{bot, id}
	r.handlerRuns[k]++
	if _, ok := r.firstHandled[k]; !ok {
		now := time.Now()
		r.firstHandled[k] = now
		if e, ok := r.events[id]; ok {
			r.latencies = append(r.latencies, now.Sub(e.at))
		}
	}
	r.obsLocked(oracle.Observation{Kind: oracle.ObsHandled, Bot: bot, EventID: id, Payload: body})
}

// result: the bot is about to answer; ok is a 2xx.
func (r *recorder) result(bot, id string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.okResults++
	}
	r.obsLocked(oracle.Observation{Kind: oracle.ObsResult, Bot: bot, EventID: id, OK: ok})
}

// rejected: a receiver refused a request's signature or timestamp.
func (r *recorder) rejected(bot, id, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejections++
	if len(r.rejectDetail) < 10 {
		r.rejectDetail = append(r.rejectDetail, fmt.Sprintf("bot %s event %s: %s", bot, id, reason))
	}
}

func (r *recorder) dupInjected() {
	r.mu.Lock()
	r.dups++
	r.mu.Unlock()
}

func (r *recorder) harnessError(format string, args ...any) {
	r.mu.Lock()
	r.harnessErrs = append(r.harnessErrs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// storeSnapshot takes what the store observer read (cursors first, then
// the queue): new rows become enqueued (or dead) observations, then moved
// cursors become cursor observations. Reading the cursors first makes
// this sound: every event a cursor passed was handed off before the read,
// so its row is in the later listing, or its 2xx was already recorded, or
// it is gone because it was acknowledged (after a recorded 2xx) — or lost.
func (r *recorder) storeSnapshot(cursors []impl.Cursor, msgs []impl.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		k := key{m.Subscriber, m.EventID}
		if !r.seenRows[k] {
			r.seenRows[k] = true
			r.obsLocked(oracle.Observation{Kind: oracle.ObsEnqueued, Messages: []impl.Message{m}})
		}
		if m.Dead && !r.deadRows[k] {
			r.deadRows[k] = true
			r.obsLocked(oracle.Observation{Kind: oracle.ObsDead, Bot: m.Subscriber, EventID: m.EventID, Stream: m.Stream, Pos: m.Pos})
		}
	}
	for _, c := range cursors {
		if last, ok := r.cursors[c.Key]; ok && last.Compare(c.Pos) == 0 {
			continue
		}
		r.cursors[c.Key] = c.Pos
		r.obsLocked(oracle.Observation{Kind: oracle.ObsCursor, Stream: c.Key.Stream, Cursor: c})
	}
}

// memberAt is the checker's rule: the last entry for bot with From
// strictly before pos decides.
func (r *recorder) memberAtLocked(stream, bot string, pos impl.Position) bool {
	member := false
	for _, m := range r.streams[stream] {
		if m.bot == bot && m.from.Compare(pos) < 0 {
			member = m.member
		}
	}
	return member
}

// outstanding counts the obligations neither handled nor dead-lettered
// (as far as the store observer saw).
func (r *recorder) outstanding() (owed, open int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.order {
		e := r.events[id]
		for _, b := range r.bots {
			if !r.memberAtLocked(e.stream, b, e.pos) {
				continue
			}
			owed++
			k := key{b, id}
			if _, ok := r.firstHandled[k]; !ok && !r.deadRows[k] {
				open++
			}
		}
	}
	return owed, open
}

// The recorder: everything the harness observed from outside the engine,
// with wall-clock times, for the judge (judge.go).

package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

type key struct{ bot, event string }

// compare orders keys by bot, then event: reports must not depend on map
// order.
func (k key) compare(o key) int {
	return cmp.Or(strings.Compare(k.bot, o.bot), strings.Compare(k.event, o.event))
}

type produced struct {
	stream  string
	log     bool
	pos     impl.Position
	at      time.Time
	payload []byte
	served  []time.Time // each time the upstream handed it to the engine
}

type memb struct {
	bot    string
	from   impl.Position
	member bool
	at     time.Time
}

// Request outcomes as the bot saw them.
const (
	outOK       = "2xx"
	outStatus   = "status"   // a non-2xx answer (status in request.status)
	outTimeout  = "timeout"  // answered after the engine's webhook timeout
	outRejected = "rejected" // the receiver refused the signature or timestamp
	// outReset: the bot was refusing connections. It accepted this one,
	// read the request (so the attempt is seen and attributed) and reset
	// the connection without an answer: a refused connection to the
	// engine, an attempt to the harness (PROTOCOL.md, Webhooks).
	outReset = "reset"
	// outDropped: the connection ended before the bot's answer reached it
	// (the engine hung up, or the bot's server closed): the engine learned
	// no answer, so none is recorded as given.
	outDropped = "dropped"
	outNone    = "" // still open when the run ended
)

// request is one webhook request that reached a bot.
type request struct {
	bot, event string
	at         time.Time // received (body read)
	answered   time.Time // when the engine could have learned the outcome
	// writing: when the bot began writing its answer. The engine can learn
	// nothing sooner; answered is read after the flush returns, which a
	// loaded machine can delay by tens of milliseconds, so a lower bound
	// on the engine's wait is measured from here.
	writing time.Time
	outcome string
	status  int
	mode    int32  // the bot's fault mode when it arrived
	phantom string // why the request carries what was never produced, if it does
}

// window is a span of wall-clock time.
type window struct{ from, to time.Time }

// kill is one engine death: a planned SIGKILL (at = just before the
// signal, reaped = the process is gone, up = the next one started) or an
// exit on its own (at = reaped = when the harness noticed).
type kill struct {
	at, reaped, up time.Time
	planned        bool
}

type rotation struct {
	bot string
	at  time.Time
}

type botFault struct {
	bot  string
	mode int32
	w    window
}

// deadSeen is a dead letter the engine reported.
type deadSeen struct {
	attempts int
	at       time.Time
}

// recorder keeps what the harness observed. Everything is under one lock,
// so a request a bot received is recorded after the production of its
// event (the producer records under the same lock).
type recorder struct {
	mu    sync.Mutex
	start time.Time

	events  map[string]*produced
	order   []string // production order
	streams map[string][]memb
	bots    []string
	keyAt   map[string]time.Time // when a bot's key was published (absent: from the start)
	keyless map[string]bool      // bots registered without a key

	requests     []*request
	emptyConns   []rotation // connections a bot accepted that carried no whole request (bots.go: connWatch)
	handlerRuns  map[key]int
	firstHandled map[key]time.Time
	latencies    []time.Duration
	rejections   int
	snap         snapRecord // snapshot sources (snapshot.go)
	rejectDetail []string
	dups         int
	harnessErrs  []string

	rotations []rotation
	moves     []rotation // webhook URL moves
	kills     []kill
	dbFaults  []window
	botFaults []botFault
	healAt    time.Time
	endAt     time.Time

	// What the observation endpoint reported (nil: not read or not served).
	atHeal, atEnd *protocol.Observation
	observeNote   string // why it could not be read, when it could not
	dead          map[key]deadSeen
	// exposes: a reading listed dead_letters (even empty): the engine
	// reports its dead letters, and a dead letter must be listed.
	exposes bool

	// What the settle ended with (settled): the obligations still open,
	// the ones liveness fails on.
	settleOpen []key
	settleWhy  string // why the settle gave up with work open (settleOver)

	wireSeen // record_wire.go: opening fetches, cursor readings, scrapes
}

func newRecorder() *recorder {
	return &recorder{
		start: time.Now(), events: map[string]*produced{}, streams: map[string][]memb{},
		keyAt: map[string]time.Time{}, keyless: map[string]bool{},
		handlerRuns: map[key]int{}, firstHandled: map[key]time.Time{}, dead: map[key]deadSeen{},
	}
}

// producedLocked records an event the upstream now holds.
func (r *recorder) producedLocked(stream string, log bool, id string, pos impl.Position, payload []byte) {
	r.events[id] = &produced{stream: stream, log: log, pos: pos, at: time.Now(), payload: payload}
	r.order = append(r.order, id)
}

func (r *recorder) membershipLocked(stream string, bot string, from impl.Position, member bool) {
	r.streams[stream] = append(r.streams[stream], memb{bot: bot, from: from, member: member, at: time.Now()})
	if !slices.Contains(r.bots, bot) {
		r.bots = append(r.bots, bot)
		sort.Strings(r.bots)
	}
}

func (r *recorder) keyPublishedLocked(bot string) { r.keyAt[bot] = time.Now() }

func (r *recorder) arrived(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, id := range ids {
		if e := r.events[id]; e != nil {
			e.served = append(e.served, now)
		}
	}
}

// send: a request reached a bot's server.
func (r *recorder) send(bot, id string, body []byte, mode int32) *request {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := &request{bot: bot, event: id, at: time.Now(), mode: mode}
	switch e := r.events[id]; {
	case e == nil:
		q.phantom = "its webhook-id names no event the upstream produced"
	case string(e.payload) != string(body):
		q.phantom = fmt.Sprintf("its body (%d bytes) differs from the event's payload (%d bytes)", len(body), len(e.payload))
	}
	r.requests = append(r.requests, q)
	return q
}

// emptyConn: bot accepted a connection at at that closed before it
// carried one whole request: an engine that gave up before its request was
// written (PROTOCOL.md, Attempts and dead letters: no attempt on the
// wire). The judge does not count these; failure texts cite them.
func (r *recorder) emptyConn(bot string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emptyConns = append(r.emptyConns, rotation{bot: bot, at: at})
}

// emptyConnsLocked counts bot's empty connections accepted in [from, to].
func (r *recorder) emptyConnsLocked(bot string, from, to time.Time) int {
	n := 0
	for _, c := range r.emptyConns {
		if c.bot == bot && !c.at.Before(from) && !c.at.After(to) {
			n++
		}
	}
	return n
}

// unread: the engine reset the connection with q's 2xx unread in its
// socket (closing a socket with unread data resets it): it never took
// the answer, so q is an attempt whose answer was lost, not a 2xx it
// learned (PROTOCOL.md, Attempts and dead letters: "When an answer
// reached the engine").
func (r *recorder) unread(q *request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.outcome == outOK {
		q.outcome = outDropped
	}
}

// answer: the bot answered q (or, for outTimeout, the engine's timeout
// ran out at answered).
func (r *recorder) answer(q *request, outcome string, status int, answered time.Time) {
	r.answerWritten(q, outcome, status, answered, answered)
}

// answerWritten: as answer, for an answer the bot began writing at writing.
func (r *recorder) answerWritten(q *request, outcome string, status int, writing, answered time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q.outcome, q.status, q.writing, q.answered = outcome, status, writing, answered
}

func (r *recorder) handled(bot, id string) {
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

func (r *recorder) killed(k kill) {
	r.mu.Lock()
	r.kills = append(r.kills, k)
	r.mu.Unlock()
}

// dbFault records a database fault and returns its index (dbFaultEnded).
func (r *recorder) dbFault(w window) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dbFaults = append(r.dbFaults, w)
	return len(r.dbFaults) - 1
}

// dbFaultEnded moves fault i's end to t if t is later: a stall lasts
// until the proxy forwards again.
func (r *recorder) dbFaultEnded(i int, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := &r.dbFaults[i]; t.After(w.to) {
		w.to = t
	}
}

func (r *recorder) botFault(f botFault) {
	r.mu.Lock()
	r.botFaults = append(r.botFaults, f)
	r.mu.Unlock()
}

func (r *recorder) mark(heal bool) {
	r.mu.Lock()
	if heal {
		r.healAt = time.Now()
	} else {
		r.endAt = time.Now()
	}
	r.mu.Unlock()
}

// observed takes one reading of the observation endpoint (nil: none).
func (r *recorder) observed(o *protocol.Observation, note string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o == nil {
		if r.observeNote == "" {
			r.observeNote = note
		}
		return
	}
	now := time.Now()
	if o.Cursors != nil {
		r.cursorReads = append(r.cursorReads, cursorRead{at: now, cursors: o.Cursors})
	}
	if o.DeadLetters != nil {
		r.exposes = true
	}
	for _, d := range o.DeadLetters {
		k := key{d.Bot, d.Event}
		if _, ok := r.dead[k]; !ok {
			r.dead[k] = deadSeen{attempts: d.Attempts, at: now}
		}
	}
}

// memberAtLocked is the protocol's rule: the last entry for bot with From
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

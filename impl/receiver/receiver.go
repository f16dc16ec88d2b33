// Package receiver is the bot-side SDK of seed 000: it verifies a Standard
// Webhooks request (signature, timestamp tolerance), drops duplicates by
// event id with a cache bounded in time and in size, and runs the handler
// once for each new event.
//
// Time is passed in; the receiver never reads a clock, so the simulator can
// drive it deterministically. A duplicate that arrives after its cache entry
// was evicted cannot be recognised here: it is handled again and reported
// by whoever sees the whole trace (the simulator's checker).
package receiver

import (
	"crypto/subtle"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// Defaults for zero Config fields.
const (
	DefaultTolerance  = 300 * time.Second
	DefaultWindow     = 24 * time.Hour
	DefaultMaxEntries = 10000
)

// Config configures a Receiver. Zero fields take the defaults above.
type Config struct {
	Secret     []byte        // HMAC key shared with the sender
	Tolerance  time.Duration // max |now - webhook-timestamp|
	Window     time.Duration // how long an event id is remembered
	MaxEntries int           // most ids remembered; the oldest go first
	NoDedup    bool          // the seed-000 "today" SDK: no seen-event cache
}

// Outcome classifies what Handle did.
type Outcome int

const (
	Handled   Outcome = iota + 1 // new event: the handler ran
	Duplicate                    // seen within the window: the handler did not run
	Rejected                     // bad signature or timestamp: the handler did not run
)

func (o Outcome) String() string {
	switch o {
	case Handled:
		return "handled"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	}
	return "unknown"
}

// Result is Handle's answer. Status is the HTTP status to reply with: 2xx
// for handled and duplicate (the sender must stop retrying), 4xx for a
// rejected request.
type Result struct {
	Outcome Outcome
	Status  int
	Reason  string // why it was rejected
}

type entry struct {
	id   string
	seen time.Time
	seq  uint64
}

// Receiver is safe for concurrent use; the handler runs outside its lock.
type Receiver struct {
	cfg Config

	mu    sync.Mutex
	index map[string]entry // id -> its live entry
	order []entry          // insertion order; stale copies are skipped
	head  int
	seq   uint64
}

// New returns a receiver with cfg's zero fields defaulted.
func New(cfg Config) *Receiver {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	return &Receiver{cfg: cfg, index: map[string]entry{}}
}

// Handle processes one webhook request: id, ts and sig are the webhook-id,
// webhook-timestamp and webhook-signature headers.
func (r *Receiver) Handle(now time.Time, id string, ts int64, sig string, body []byte, handler func(id string, body []byte)) Result {
	if res, ok := r.verify(now, id, ts, sig, body); !ok {
		return res
	}
	if !r.cfg.NoDedup && !r.remember(now, id) {
		return Result{Outcome: Duplicate, Status: 200}
	}
	if handler != nil {
		handler(id, body)
	}
	return Result{Outcome: Handled, Status: 200}
}

func (r *Receiver) verify(now time.Time, id string, ts int64, sig string, body []byte) (Result, bool) {
	tol := int64(r.cfg.Tolerance / time.Second)
	switch d := now.Unix() - ts; {
	case d > tol:
		return Result{Outcome: Rejected, Status: 400, Reason: "webhook-timestamp too old"}, false
	case d < -tol:
		return Result{Outcome: Rejected, Status: 400, Reason: "webhook-timestamp too far in the future"}, false
	}
	want := []byte(engine.Sign(r.cfg.Secret, id, ts, body))
	// Several signatures may be given (secret rotation); any one will do.
	for _, s := range strings.Fields(sig) {
		if subtle.ConstantTimeCompare([]byte(s), want) == 1 {
			return Result{}, true
		}
	}
	return Result{Outcome: Rejected, Status: 401, Reason: "no matching webhook-signature"}, false
}

// remember records id at now and reports whether it is new: never seen, or
// its entry expired or was evicted. A duplicate does not refresh its entry,
// so an id is forgotten Window after it was first handled.
func (r *Receiver) remember(now time.Time, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	if e, ok := r.index[id]; ok && r.live(e, now) {
		return false
	}
	for len(r.index) >= r.cfg.MaxEntries {
		r.evictOldest()
	}
	r.seq++
	e := entry{id: id, seen: now, seq: r.seq}
	r.index[id] = e
	r.order = append(r.order, e)
	return true
}

func (r *Receiver) live(e entry, now time.Time) bool {
	return now.Sub(e.seen) < r.cfg.Window
}

// expire drops entries from the front of the insertion order while they
// are past the window.
func (r *Receiver) expire(now time.Time) {
	for r.head < len(r.order) {
		e := r.order[r.head]
		if cur, ok := r.index[e.id]; ok && cur.seq == e.seq {
			if r.live(e, now) {
				break
			}
			delete(r.index, e.id)
		}
		r.pop()
	}
}

// evictOldest drops the oldest live entry (insertion order).
func (r *Receiver) evictOldest() {
	for r.head < len(r.order) {
		e := r.order[r.head]
		r.pop()
		if cur, ok := r.index[e.id]; ok && cur.seq == e.seq {
			delete(r.index, e.id)
			return
		}
	}
}

func (r *Receiver) pop() {
	r.order[r.head] = entry{}
	r.head++
	// Compact once the dead prefix dominates, keeping appends amortised O(1).
	if r.head > 64 && r.head*2 >= len(r.order) {
		n := copy(r.order, r.order[r.head:])
		clear(r.order[n:])
		r.order = r.order[:n]
		r.head = 0
	}
}

// Len returns how many event ids are remembered.
func (r *Receiver) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.index)
}

// Package protoserver serves the two sides of runtime/PROTOCOL.md that a
// delivery engine consumes: an upstream of ordered streams (log streams
// with a minipool sealed into miniblocks, and timestamp streams) with
// replay from a position, and a registry of bots and memberships. The
// chaos harness runs both; runtime tests use them against the real
// runtime.
//
// Both are in-memory and safe for concurrent use. Long polls are bounded
// (MaxWait) so no request loop runs unbounded in time.
package protoserver

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// MaxWait caps a long poll's ?wait=.
const MaxWait = 30 * time.Second

// maxBatch caps the events in one answer.
const maxBatch = 500

// notifier wakes long polls on a change.
type notifier struct{ ch chan struct{} }

func (n *notifier) wait() <-chan struct{} {
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) fire() {
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

func parseWait(r *http.Request, maxWait time.Duration) (time.Duration, error) {
	if maxWait <= 0 {
		maxWait = MaxWait
	}
	s := r.URL.Query().Get("wait")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errBadWait
	}
	if d > maxWait {
		d = maxWait
	}
	return d, nil
}

type httpError string

func (e httpError) Error() string { return string(e) }

const errBadWait = httpError("wait: want a Go duration such as 10s")

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Upstream serves streams of events.
type Upstream struct {
	mu      sync.Mutex
	streams map[string]*stream
	changed notifier

	// OnServe, if set, is called (outside the lock) with every batch
	// handed to a client: the chaos harness records arrivals with it.
	OnServe func(stream string, evs []protocol.Event)
	// Registry, if set, is the registry whose version each answer
	// carries (protocol.Events.RegistryVersion).
	Registry *Registry
	// MaxWait caps a long poll's wait= (MaxWait when zero); a test sets
	// it long, so a poll that answers on its wait's end is told apart
	// from one that woke, whatever the machine's load.
	MaxWait time.Duration
}

type stream struct {
	kind    engine.StreamKind
	events  []protocol.Event // arrival order
	ids     map[string]bool
	sealed  int64
	openIdx int64
}

// NewUpstream returns an upstream with no streams.
func NewUpstream() *Upstream { return &Upstream{streams: map[string]*stream{}} }

// AddStream declares a stream (idempotent).
func (u *Upstream) AddStream(name string, kind engine.StreamKind) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.streams[name] == nil {
		u.streams[name] = &stream{kind: kind, ids: map[string]bool{}}
	}
}

// Produce appends an event to a declared stream and returns its position:
// (miniblock, index) in the minipool for a log stream, (created_at ms, 0,
// id) for a timestamp stream. A repeated id is refused (false).
func (u *Upstream) Produce(name, id string, payload []byte, createdAt time.Time) (impl.Position, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.streams[name]
	if s == nil || s.ids[id] {
		return impl.Position{}, false
	}
	s.ids[id] = true
	var pos impl.Position
	if s.kind == engine.TimestampStream {
		pos = impl.Position{Major: createdAt.UnixMilli(), ID: id}
	} else {
		pos = impl.Position{Major: s.sealed + 1, Minor: s.openIdx}
		s.openIdx++
	}
	s.events = append(s.events, protocol.Event{ID: id, Pos: protocol.FromPos(pos),
		Payload: base64.StdEncoding.EncodeToString(payload), CreatedAt: createdAt.UTC()})
	u.changed.fire()
	return pos, true
}

// Seal closes a log stream's minipool into the next miniblock (no-op when
// it is empty or the stream is a timestamp stream).
func (u *Upstream) Seal(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.streams[name]; s != nil && s.kind == engine.LogStream && s.openIdx > 0 {
		s.sealed++
		s.openIdx = 0
	}
}

// ServeHTTP answers GET /v1/streams/{stream}/events.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, protocol.PathEvents)
	name, tail, ok2 := strings.Cut(rest, "/")
	if r.Method != http.MethodGet || !ok || !ok2 || tail != "events" {
		http.Error(w, "not found: GET /v1/streams/{stream}/events", http.StatusNotFound)
		return
	}
	wait, err := parseWait(r, u.MaxWait)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	u.mu.Lock()
	s := u.streams[name]
	if s == nil {
		u.mu.Unlock()
		http.Error(w, "no stream "+strconv.Quote(name), http.StatusNotFound)
		return
	}
	kind := s.kind
	offset := int64(0)
	var keep func(protocol.Event) bool
	switch {
	case q.Has("next"):
		offset, err = strconv.ParseInt(q.Get("next"), 10, 64)
		if err != nil || offset < 0 || offset > int64(len(s.events)) {
			u.mu.Unlock()
			http.Error(w, "next: want an offset this upstream gave", http.StatusBadRequest)
			return
		}
	case q.Get("from") == "head":
		offset = int64(len(s.events))
	case q.Has("since"):
		since, err := strconv.ParseInt(q.Get("since"), 10, 64)
		if err != nil {
			u.mu.Unlock()
			http.Error(w, "since: want Unix milliseconds", http.StatusBadRequest)
			return
		}
		keep = func(e protocol.Event) bool { return e.CreatedAt.UnixMilli() >= since }
	case q.Has("after"):
		after, err := protocol.ParseAfter(q.Get("after"))
		if err != nil {
			u.mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		keep = func(e protocol.Event) bool { return e.Pos.Pos().Compare(after) > 0 }
	default:
		u.mu.Unlock()
		http.Error(w, "give one of next=, from=head, after=major.minor, since=ms", http.StatusBadRequest)
		return
	}
	u.mu.Unlock()

	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		u.mu.Lock()
		out := protocol.Events{Stream: name, Kind: protocol.KindName(kind), Events: []protocol.Event{}}
		i := offset
		for ; i < int64(len(s.events)) && len(out.Events) < maxBatch; i++ {
			if e := s.events[i]; keep == nil || keep(e) {
				out.Events = append(out.Events, e)
			}
		}
		out.Next = i
		if n := len(out.Events); n > 0 {
			last := out.Events[n-1].Pos
			out.Cookie = base64.StdEncoding.EncodeToString([]byte(protocol.FormatAfter(last.Pos())))
		}
		woke := u.changed.wait()
		u.mu.Unlock()
		if u.Registry != nil {
			// Read after the events: a membership change made before an
			// event was produced is at or below this version.
			out.RegistryVersion = u.Registry.Version()
		}
		if len(out.Events) > 0 || wait == 0 {
			if u.OnServe != nil && len(out.Events) > 0 {
				u.OnServe(name, out.Events)
			}
			writeJSON(w, out)
			return
		}
		offset = i // scanned and filtered out: never look again
		select {
		case <-woke:
		case <-deadline.C:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

// Registry serves bots and memberships.
type Registry struct {
	mu      sync.Mutex
	reg     protocol.Registry
	changed notifier
	// MaxWait caps a long poll's wait= (MaxWait when zero), as Upstream's.
	MaxWait time.Duration
}

// NewRegistry returns an empty registry at version 1.
func NewRegistry() *Registry { return &Registry{reg: protocol.Registry{Version: 1}} }

// AddBot registers a bot (its URL may change later by adding it again).
func (g *Registry) AddBot(b protocol.Bot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.reg.Bots {
		if g.reg.Bots[i].ID == b.ID {
			g.reg.Bots[i] = b
			g.bump()
			return
		}
	}
	g.reg.Bots = append(g.reg.Bots, b)
	g.bump()
}

// PublishKey marks a bot's key as published.
func (g *Registry) PublishKey(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.reg.Bots {
		if g.reg.Bots[i].ID == id {
			g.reg.Bots[i].HasKey = true
		}
	}
	g.bump()
}

// AddMembership appends a membership entry.
func (g *Registry) AddMembership(m protocol.Membership) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reg.Memberships = append(g.reg.Memberships, m)
	g.bump()
}

// Version is the registry's current version.
func (g *Registry) Version() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reg.Version
}

// Snapshot returns a copy of the registry.
func (g *Registry) Snapshot() protocol.Registry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.copyLocked()
}

func (g *Registry) copyLocked() protocol.Registry {
	r := g.reg
	r.Bots = append([]protocol.Bot(nil), r.Bots...)
	r.Memberships = append([]protocol.Membership(nil), r.Memberships...)
	return r
}

func (g *Registry) bump() {
	g.reg.Version++
	g.changed.fire()
}

// ServeHTTP answers GET /v1/registry[?after=V&wait=D].
func (g *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != protocol.PathRegistry {
		http.Error(w, "not found: GET /v1/registry", http.StatusNotFound)
		return
	}
	wait, err := parseWait(r, g.MaxWait)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	after := int64(-1)
	if s := r.URL.Query().Get("after"); s != "" {
		if after, err = strconv.ParseInt(s, 10, 64); err != nil {
			http.Error(w, "after: want a version number", http.StatusBadRequest)
			return
		}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		snap, woke := g.copyLocked(), g.changed.wait()
		g.mu.Unlock()
		if snap.Version > after || wait == 0 {
			writeJSON(w, snap)
			return
		}
		select {
		case <-woke:
		case <-deadline.C:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

package receiver

import (
	"context"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Deduper remembers which webhook-ids were handled.
type Deduper interface {
	// Claim records id as handled at now and reports whether it is new.
	Claim(ctx context.Context, id string, now time.Time) (bool, error)
	// Release undoes the claim of an id whose handler failed, so that the
	// sender's retry runs the handler again.
	Release(id string)
}

// MemoryDedup is the in-process Deduper: an id is remembered for a window
// after it was first handled, and at most maxEntries ids are kept (the
// oldest go first). It is safe for concurrent use.
type MemoryDedup struct {
	window     time.Duration
	maxEntries int

	mu    sync.Mutex
	index map[string]entry // id -> its live entry
	order []entry          // insertion order; stale copies are skipped
	head  int
	seq   uint64
}

type entry struct {
	id   string
	seen time.Time
	seq  uint64
}

// NewMemoryDedup returns an in-memory dedup; zero arguments take
// DefaultWindow and DefaultMaxEntries.
func NewMemoryDedup(window time.Duration, maxEntries int) *MemoryDedup {
	if window <= 0 {
		window = DefaultWindow
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	return &MemoryDedup{window: window, maxEntries: maxEntries, index: map[string]entry{}}
}

// Claim records id at now and reports whether it is new: never seen, or
// its entry expired or was evicted. A duplicate does not refresh its entry,
// so an id is forgotten Window after it was first handled.
func (m *MemoryDedup) Claim(_ context.Context, id string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	if e, ok := m.index[id]; ok && m.live(e, now) {
		return false, nil
	}
	for len(m.index) >= m.maxEntries {
		m.evictOldest()
	}
	m.seq++
	e := entry{id: id, seen: now, seq: m.seq}
	m.index[id] = e
	m.order = append(m.order, e)
	return true, nil
}

// Release forgets id; its stale copy in the order is skipped later.
func (m *MemoryDedup) Release(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.index, id)
}

// Len returns how many ids are remembered.
func (m *MemoryDedup) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index)
}

func (m *MemoryDedup) live(e entry, now time.Time) bool {
	return now.Sub(e.seen) < m.window
}

// expire drops entries from the front of the insertion order while they
// are past the window.
func (m *MemoryDedup) expire(now time.Time) {
	for m.head < len(m.order) {
		e := m.order[m.head]
		if cur, ok := m.index[e.id]; ok && cur.seq == e.seq {
			if m.live(e, now) {
				break
			}
			delete(m.index, e.id)
		}
		m.pop()
	}
}

// evictOldest drops the oldest live entry (insertion order).
func (m *MemoryDedup) evictOldest() {
	for m.head < len(m.order) {
		e := m.order[m.head]
		m.pop()
		if cur, ok := m.index[e.id]; ok && cur.seq == e.seq {
			delete(m.index, e.id)
			return
		}
	}
}

func (m *MemoryDedup) pop() {
	m.order[m.head] = entry{}
	m.head++
	// Compact once the dead prefix dominates, keeping appends amortised O(1).
	if m.head > 64 && m.head*2 >= len(m.order) {
		n := copy(m.order, m.order[m.head:])
		clear(m.order[n:])
		m.order = m.order[:n]
		m.head = 0
	}
}

// Marker is the durable dedup primitive; impl.Store has it.
type Marker interface {
	// MarkProcessed records that subscriber processed eventID at now and
	// reports whether it is new (never seen, or last seen at or before
	// now - window).
	MarkProcessed(ctx context.Context, req impl.MarkRequest) (bool, error)
}

// StoreDedup dedups through a store's MarkProcessed, so a duplicate is
// recognised across receiver restarts and across several receiver
// processes sharing the store.
//
// MarkProcessed is a check-and-set with no undo, so a claim is made before
// the handler runs. Release (the handler failed) cannot unmark the store:
// the id is kept in a bounded in-process list instead and the next Claim
// of it succeeds once. A receiver restarted between the failure and the
// retry therefore treats the retry as a duplicate; a handler that can fail
// after its side effect should make that effect idempotent itself.
type StoreDedup struct {
	store      Marker
	subscriber string
	window     time.Duration

	mu       sync.Mutex
	released map[string]bool
	order    []string // release order, for the bound
}

// maxReleased bounds StoreDedup's list of released ids.
const maxReleased = 10000

// NewStoreDedup returns a Deduper that records ids under subscriber in
// store for window (0 = DefaultWindow).
func NewStoreDedup(store Marker, subscriber string, window time.Duration) *StoreDedup {
	if window <= 0 {
		window = DefaultWindow
	}
	return &StoreDedup{store: store, subscriber: subscriber, window: window, released: map[string]bool{}}
}

// Claim marks id in the store and reports whether it is new (or was
// released by this process since).
func (d *StoreDedup) Claim(ctx context.Context, id string, now time.Time) (bool, error) {
	if d.takeReleased(id) {
		return true, nil
	}
	return d.store.MarkProcessed(ctx, impl.MarkRequest{Subscriber: d.subscriber, EventID: id, Now: now, Window: d.window})
}

// Release lets the next Claim of id succeed in this process.
func (d *StoreDedup) Release(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.released[id] {
		return
	}
	for len(d.order) >= maxReleased {
		delete(d.released, d.order[0])
		d.order = d.order[1:]
	}
	d.released[id] = true
	d.order = append(d.order, id)
}

func (d *StoreDedup) takeReleased(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.released[id] {
		return false
	}
	delete(d.released, id)
	// Its copy in order stays until it is pushed out; a later Release of
	// the same id re-adds it, so the bound holds within a factor of two.
	return true
}

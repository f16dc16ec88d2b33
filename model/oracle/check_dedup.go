package oracle

import (
	"slices"
	"time"
)

// receiver-dedup-bounds (issue 9): a bot's receiver remembers an id exactly
// as its documented bounds say. The in-memory cache remembers an id from
// its first handling for DedupWindow and keeps at most DedupMaxEntries ids,
// the oldest going first; a failed handler run forgets its id again. The
// store's durable dedup (MarkProcessed) remembers an id for DedupWindow
// from the claim that recorded it; a failed handler run lets the next
// request of that id through once. The checker replays each bot's claims —
// every handler run, failed or not, and every request answered as a
// duplicate — on its own model of the cache and reports a handler run the
// model says must have been a duplicate, and a duplicate answer for an id
// the model says was forgotten (a cache that outlives its bounds grows
// without limit and silently drops the deliveries that the bounds promise
// to let through again). Bots are judged only when CheckParams.ExactDedup
// names their dedup; others keep the idempotent-replay check alone.

// Dedup kinds for CheckParams.ExactDedup.
const (
	DedupMemory  = "memory"
	DedupDurable = "durable"
)

type rxEntry struct {
	id   string
	seen time.Time
}

type rxModel struct {
	durable bool
	order   []rxEntry            // memory: live entries, insertion order
	marks   map[string]time.Time // durable: the store's entries
	freed   map[string]bool      // durable: released ids
}

func (c *checker) rxModelOf(bot string) *rxModel {
	kind := c.p.ExactDedup[bot]
	if kind == "" {
		return nil
	}
	if c.rx == nil {
		c.rx = map[string]*rxModel{}
	}
	m := c.rx[bot]
	if m == nil {
		m = &rxModel{durable: kind == DedupDurable, marks: map[string]time.Time{}, freed: map[string]bool{}}
		c.rx[bot] = m
	}
	return m
}

// claim applies one claim of id at now and reports whether the model
// remembers id (the claim is a duplicate).
func (m *rxModel) claim(id string, now time.Time, window time.Duration, max int) bool {
	if m.durable {
		if m.freed[id] {
			delete(m.freed, id)
			return false
		}
		if seen, ok := m.marks[id]; ok && now.Sub(seen) < window {
			return true
		}
		m.marks[id] = now
		return false
	}
	for len(m.order) > 0 && now.Sub(m.order[0].seen) >= window {
		m.order = m.order[1:]
	}
	if slices.ContainsFunc(m.order, func(e rxEntry) bool { return e.id == id }) {
		return true
	}
	for len(m.order) > 0 && len(m.order) >= max {
		m.order = m.order[1:]
	}
	m.order = append(m.order, rxEntry{id: id, seen: now})
	return false
}

func (m *rxModel) release(id string) {
	if m.durable {
		m.freed[id] = true
		return
	}
	m.order = slices.DeleteFunc(m.order, func(e rxEntry) bool { return e.id == id })
}

// rxClaim judges one observed claim: a handler run (failed or not) or a
// duplicate answer.
func (c *checker) rxClaim(o *Observation) {
	m := c.rxModelOf(o.Bot)
	if m == nil {
		return
	}
	dup := m.claim(o.EventID, o.Time, c.p.DedupWindow, c.p.DedupMaxEntries)
	switch {
	case o.Kind == ObsDuplicate && !dup:
		c.report(InvReceiverDedupBounds, o.Bot, o.EventID, "",
			"the receiver answered a duplicate for an id its %s dedup must have forgotten (window %s, %d entries)",
			c.p.ExactDedup[o.Bot], c.p.DedupWindow, c.p.DedupMaxEntries)
	case o.Kind != ObsDuplicate && dup:
		c.report(InvReceiverDedupBounds, o.Bot, o.EventID, "",
			"the handler ran for an id its %s dedup must still remember (window %s, %d entries)",
			c.p.ExactDedup[o.Bot], c.p.DedupWindow, c.p.DedupMaxEntries)
	}
	if o.Kind == ObsHandlerFailed {
		m.release(o.EventID)
	}
}

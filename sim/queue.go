package sim

import "time"

// event is one scheduled action. Events run in (at, seq) order: seq is the
// scheduling order, so two events at the same instant run in the order they
// were scheduled, on every run.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

func (e *event) before(o *event) bool {
	if c := e.at.Compare(o.at); c != 0 {
		return c < 0
	}
	return e.seq < o.seq
}

// eventQueue is a binary min-heap of events held by value: every step
// pushes and pops events, and a heap of pointers behind container/heap's
// interface cost an allocation per event and an indirect call per
// comparison. (at, seq) is a total order, so the pop order is the same
// whatever the heap's layout.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) push(at time.Time, fn func()) {
	q.seq++
	q.h = append(q.h, event{at: at, seq: q.seq, fn: fn})
	h := q.h
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	h := q.h
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{} // drop the closure for the collector
	h = h[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.h = h
	return top
}

func (q *eventQueue) len() int { return len(q.h) }

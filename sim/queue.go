package sim

import (
	"container/heap"
	"time"
)

// event is one scheduled action. Events run in (at, seq) order: seq is the
// scheduling order, so two events at the same instant run in the order they
// were scheduled, on every run.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}

type eventQueue struct {
	h   eventHeap
	seq uint64
}

func (q *eventQueue) push(at time.Time, fn func()) {
	q.seq++
	heap.Push(&q.h, &event{at: at, seq: q.seq, fn: fn})
}

func (q *eventQueue) pop() *event { return heap.Pop(&q.h).(*event) }

func (q *eventQueue) len() int { return q.h.Len() }

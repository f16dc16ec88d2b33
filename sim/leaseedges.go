package sim

import (
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The exact edges of the lease and of the timestamp lookback.
//
// Lease: the engine gives a request up at its housekeeping once
// sentAt + Lease is not after its clock (impl/engine engine.go
// expireRequests), and the store's Claim takes a row whose lease_until is
// not after the claim's now. Housekeeping runs every CleanupInterval by
// the node's clock and sends what its pump claims at that same instant,
// so with a lease a whole number of cleanup intervals long, a request
// sent at one housekeeping and never answered meets a later one at
// exactly its lease (drawLeaseEdge).
//
// Lookback: a timestamp stream is resubscribed from its cursor less
// TimestampLookback (streams.go: Since = cursor - lookback), and the
// upstream replays what is stamped at or after Since.

// Lease and lookback probe names (coverage catalogue).
const (
	CovLeaseBelow = "boundary/lease/request-kept-just-below"
	CovLeaseAt    = "boundary/lease/request-given-up-at"
	CovLeaseAbove = "boundary/lease/request-given-up-just-above"

	CovLookbackOutside = "boundary/timestamp-lookback/event-just-outside"
	CovLookbackAt      = "boundary/timestamp-lookback/event-at"
	CovLookbackInside  = "boundary/timestamp-lookback/event-just-inside"
)

var edgeProbes = []Probe{
	{CovLeaseBelow, "a node's housekeeping ran with a request of it unanswered for a second or less under the lease by its clock (it must keep it)"},
	{CovLeaseAt, "a node's housekeeping ran with a request of it unanswered for exactly the lease by its clock (it gives it up)"},
	{CovLeaseAbove, "a node's housekeeping ran with a request of it unanswered for a second or less more than the lease by its clock"},
	{CovLookbackOutside, "a timestamp stream was resubscribed with an event stamped a second or less before its cursor less the lookback (not replayed)"},
	{CovLookbackAt, "a timestamp stream was resubscribed with an event stamped exactly its cursor less the lookback (replayed)"},
	{CovLookbackInside, "a timestamp stream was resubscribed with an event stamped a second or less after its cursor less the lookback (replayed)"},
}

// drawLeaseEdge makes the cleanup interval the lease or half of it in one
// world in six, from its own stream. The lease stays what it was (the
// head-of-line and in-flight bounds are drawn with it); a grid world
// keeps its interval (drawAligned).
func drawLeaseEdge(seed uint64, w *Workload) {
	r := actorRand(seed, "workload/lease-edge")
	if r.IntN(6) != 0 || w.Grid > 0 {
		return
	}
	c := w.EngineConfig()
	w.CleanupInterval = c.Lease / time.Duration(1+r.IntN(2))
}

// sentAt: per unanswered request (by the simulator's number), its node
// and that node's clock when it was sent.
type leaseEdges struct {
	c      *coverage
	sentAt map[int64]leaseSend
}

type leaseSend struct {
	node  string
	clock time.Time
}

func (l *leaseEdges) see(o *oracle.Observation) {
	switch o.Kind {
	case oracle.ObsSend:
		l.sentAt[o.Request] = leaseSend{o.Node, o.Clock}
	case oracle.ObsResult:
		delete(l.sentAt, o.Request)
	case oracle.ObsNodeDown:
		for req, s := range l.sentAt {
			if s.node == o.Node {
				delete(l.sentAt, req)
			}
		}
	case oracle.ObsCleanup:
		// The TTL rule runs first in the housekeeping, at the clock
		// reading the expiry compares against.
		if o.Rule != "ttl" {
			return
		}
		lease := l.c.s.ecfg.Lease
		for req, s := range l.sentAt {
			if s.node != o.Node {
				continue
			}
			d := o.Clock.Sub(s.clock)
			l.c.bnd.hit(edge(d, lease, CovLeaseBelow, CovLeaseAt, CovLeaseAbove))
			if d >= lease {
				delete(l.sentAt, req) // given up: it is not met again
			}
		}
	}
}

// lookbackEdge classifies the events stream st holds against a timestamp
// subscription's Since.
func (c *coverage) lookbackEdge(st *stream, sub engine.Subscribe) {
	if st.spec.Kind != engine.TimestampStream || sub.Fresh {
		return
	}
	for i := range st.events {
		d := time.Duration(sub.Since-st.events[i].Pos.Major) * time.Millisecond
		c.bnd.hit(edge(d, 0, CovLookbackInside, CovLookbackAt, CovLookbackOutside))
	}
}

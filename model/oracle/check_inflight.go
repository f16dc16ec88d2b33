package oracle

import "time"

// in-flight-limit: a node has at most MaxInFlightPerBot webhook requests to
// one bot that it has not yet been told the outcome of (seed 001: a slow or
// failing bot must not take every connection, and a bot is not flooded).
// The breaker's tighter limits (none open, one half-open) are judged by
// breaker-policy; snapshot notifications are outside the limit.
//
// Judged only from the sends and the answers the node was told, paired by
// request number (requests without one, as the real-process harness
// records them, are not judged). A request stops counting when the node is
// told its outcome, when the node sends the same message again (it may
// have given the older request up: its answer is ignored), when the node
// crashes, and a lease after it was sent (the engine may have expired a
// request whose outcome never came). Each of those only lowers the count,
// so the check can miss an excess, never invent one.
type chkInflight struct {
	open map[chkNodeBot]*chkOpenReqs // requests not yet answered
}

// chkOpenReqs is a (node, bot)'s open requests, one each, in the order
// sent (a handful: at most MaxInFlightPerBot + 1 not sent again).
type chkOpenReqs struct{ reqs []chkOpenReq }

type chkOpenReq struct {
	req   int64
	event string
	at    time.Time
	// resent: the node sent the same message again since. in-flight-limit
	// stops counting it (the engine may have given it up), but the
	// retry-backoff wait still does (seed 70885: the engine kept such a
	// request's slot until it gave the request up, and a retry waited
	// behind it).
	resent bool
}

// resend marks req as sent again.
func (s *chkOpenReqs) resend(req int64) {
	for i := range s.reqs {
		if s.reqs[i].req == req {
			s.reqs[i].resent = true
			return
		}
	}
}

// drop forgets req.
func (s *chkOpenReqs) drop(req int64) {
	for i, r := range s.reqs {
		if r.req == req {
			s.reqs = append(s.reqs[:i], s.reqs[i+1:]...)
			return
		}
	}
}

func newInflight() chkInflight {
	return chkInflight{open: map[chkNodeBot]*chkOpenReqs{}}
}

// inflightSend counts a non-snapshot send and judges the node's count.
func (c *checker) inflightSend(o *Observation) {
	if c.p.MaxInFlightPerBot <= 0 || o.Request == 0 || o.Node == "" {
		return
	}
	nb := c.nb(o.Node, o.Bot)
	s := c.inflight.open[nb]
	if s == nil {
		s = &chkOpenReqs{}
		c.inflight.open[nb] = s
	}
	if nk := c.nk(o.Node, c.key(o.Bot, o.EventID)); nk.hasLastReq {
		s.resend(nk.lastReq) // sent again: the older request may be given up
	}
	kept := s.reqs[:0]
	n := 0 // the requests in-flight-limit counts
	for _, r := range s.reqs {
		if c.now.Before(r.at.Add(c.p.Lease)) && r.req != o.Request {
			kept = append(kept, r)
			if !r.resent {
				n++
			}
		}
	}
	s.reqs = append(kept, chkOpenReq{req: o.Request, event: o.EventID, at: c.now})
	c.promptSlotsFull(o.Bot, len(s.reqs))
	if n+1 > c.p.MaxInFlightPerBot {
		c.report(InvInFlightLimit, o.Bot, o.EventID, chkOnce(o.Node, o.Bot)+"\x00inflight",
			"node %s sent request %d to this bot with %d of its requests to the bot still unanswered (MaxInFlightPerBot=%d), none of them sent again, answered or a lease old",
			o.Node, o.Request, n, c.p.MaxInFlightPerBot)
	}
}

// inflightTold ends a request the node was told the outcome of.
func (c *checker) inflightTold(o *Observation) {
	if s := c.inflight.open[c.nb(o.Node, o.Bot)]; s != nil {
		s.drop(o.Request)
	}
}

// inflightDown forgets a crashed node's requests: a new incarnation starts
// with none of its own.
func (c *checker) inflightDown(node string) { dropNode(c.inflight.open, node) }

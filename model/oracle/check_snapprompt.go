package oracle

import (
	"math"
	"slices"
	"time"
)

// Seed 002's delivery timing, judged from the wire and the sources alone.
// Seed 002's worker sends an app the changes between what it has and the
// source's current state one after another: each right after the previous
// one's success, a failed one again after its backoff (seed 001's retry
// policy), and it starts over whenever the snapshot worker hands it the
// source's state (on every change, every scan interval and every boot:
// ObsSourceFed). The snapshot path has no queue, so no head-of-line
// allowance applies: the engine's own policy fixes when the next send of
// an (app, source) pair is due, up to the backoff's jitter.
//
//   - retry-backoff, snapshot lower bound: a node that was told a failure
//     of its latest request of a change (webhook-id) sends that id again
//     no earlier, by its clock, than base(n) after it was told, n being
//     the failures of the id told to that incarnation since the id's last
//     2xx told to it.
//   - retry-backoff, snapshot upper side: after a failure of a change told
//     to a node, its k-th of that id in that incarnation with k below
//     MaxAttempts, some node sends the pair a change (the same id, or a
//     newer change that supersedes it) by the failure plus base(k) x (1 +
//     JitterFraction) on the told node's clock, plus snapSlack.
//   - snapshot-progress: after a 2xx of a node's latest request of a
//     change reaches it, and after the snapshot worker hands a node the
//     source's state, every app of the source that does not hold the
//     source's current state is sent a change within snapSlack (after a
//     feed: or by the end of the last failure's retry window, should the
//     engine not have given up yet). A feed opens no wait for an app with
//     a request in flight or a retry wait open: the engine acts on the
//     answer or at the retry. A change given up after MaxAttempts failures
//     is revived this way by the next feed.
//   - snapshot-progress, given up: a request whose node is never told an
//     answer (a hung connection, a lost answer) is given up by its engine
//     within giveUpBound (its lease, found at the next housekeeping) on the
//     node's clock, which then re-drives the app: an app that still lacks
//     the source's state is sent a change within that bound plus snapSlack
//     of the send, unless another request of it is in flight.
//   - idempotent-replay, snapshot: a node incarnation told a 2xx of a
//     change (op, item, version) under one webhook-id does not send that
//     change again under another id, while the app still holds it, before
//     it sends the app any other change and before the source is next
//     handed to an engine: the receiver deduplicates by webhook-id, so the
//     app's handler would run again for a change it took. A resend right
//     after the 2xx (its recording failed) keeps the id; once the node has
//     moved on to another change, coming back to this one is a new
//     decision (seed 4486: a recording failed, the retry found a newer
//     change of another item first).
//   - bounded-retry, snapshot give-up: a node incarnation that was told
//     MaxAttempts failures of one change (op, item, version) of a pair
//     since the source was last fed to an engine and since a 2xx of the
//     pair last reached one does not send that change again under a new
//     webhook-id: giving up lasts until the next feed, which is the
//     snapshot path's requeue.
//
// A wait is void (not judged) when: a node crashed or booted since it
// opened (a new incarnation remembers nothing and is fed again); a
// request of the pair has not yet been answered to its node at the
// deadline (its answer opens the next wait); the app already holds the source's current state
// (nothing is owed); or the app's bot had BreakerFailures or more failures
// told to nodes from BreakerOpenFor before the wait to its deadline, or a
// node's breaker for it left the closed state since (an engine whose
// breaker covers snapshot sends defers them). Each store fault injected
// anywhere moves every open deadline by four StoreRetry (two retries on a
// clock running at half speed). A progress wait is also void while a retry
// wait of the pair is open.
//
// Deadlines stated on a node's clock are turned into simulated time with
// the node's rate since its boot (its clock at ObsNodeUp and at the
// answer); without a usable sample the clock is taken to run at half
// speed, the slowest drift the fault plans draw.

// snapSlack is the scheduling slack of every snapshot wait.
const snapSlack = 10 * time.Second

const (
	snapWaitRetry = "retry"
	snapWaitNext  = "next"
	snapWaitFeed  = "feed"
	snapWaitGone  = "given-up"
)

type snapReqInfo struct {
	pair    chkKey // (app, source)
	node    string
	downs   int
	id      string
	content string // op, item and version
}

type snapNodeID struct {
	node  string
	downs int
	key   chkKey // (app, webhook-id): apps share ids
}

type snapNodeContent struct {
	node    string
	downs   int
	pair    chkKey
	content string
}

// snapTold is what one node incarnation was told about one webhook-id.
type snapTold struct {
	clock   time.Time // node clock when its last failure was told
	sinceOK int       // failures told since the id's last 2xx told
	total   int       // failures told in this incarnation
	latest  int64     // the incarnation's latest request of the id
}

type snapWait struct {
	pair     chkKey
	kind     string
	node     string
	id       string // retry: the failed webhook-id
	req      int64  // given-up: the request its node is never told an answer to
	at       time.Time
	deadline time.Time
	epoch    int
}

type snapBoot struct {
	at    time.Time
	clock time.Time
}

type snapPrompt struct {
	reqs        map[int64]*snapReqInfo
	outstanding map[chkKey]int
	ids         map[snapNodeID]*snapTold
	gaveUp      map[snapNodeContent]int
	okTold      map[snapNodeContent]string // change -> the webhook-id a 2xx of it was told under
	retryUntil  map[chkKey]time.Time       // pair -> end of the latest failure's retry window
	waits       []*snapWait
	epoch       int                    // crashes and boots so far
	fails       map[string][]time.Time // per app: snapshot failures told to nodes
	boots       map[string]snapBoot
}

func newSnapPrompt() snapPrompt {
	return snapPrompt{
		reqs: map[int64]*snapReqInfo{}, outstanding: map[chkKey]int{}, ids: map[snapNodeID]*snapTold{},
		gaveUp: map[snapNodeContent]int{}, okTold: map[snapNodeContent]string{}, retryUntil: map[chkKey]time.Time{}, fails: map[string][]time.Time{},
		boots: map[string]snapBoot{},
	}
}

func snapContent(o *Observation) string { return o.Op + "\x00" + o.Item + "\x00" + o.Version }

// snapPromptSend: a send of a change ends every wait of its pair; it must
// keep the backoff of the id's last failure told to its node, and must not
// revive a change its node gave up on.
func (c *checker) snapPromptSend(o *Observation) {
	o = c.unstep(o) // clock waits of one node (check_clockjump.go)
	sp := &c.sprompt
	pair := c.key(o.Bot, o.Stream)
	downs := c.node(o.Node).downs
	sp.reqs[o.Request] = &snapReqInfo{pair: pair, node: o.Node, downs: downs, id: o.EventID, content: snapContent(o)}
	sp.outstanding[pair]++
	nid := snapNodeID{o.Node, downs, c.key(o.Bot, o.EventID)}
	t := sp.ids[nid]
	if t == nil {
		t = &snapTold{}
		sp.ids[nid] = t
	}
	if t.sinceOK > 0 && !o.Clock.IsZero() {
		if lo := t.clock.Add(c.backoffBase(t.sinceOK) - chkTimeSlack); o.Clock.Before(lo) {
			c.report(InvRetryBackoff, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID)+"\x00snap-early",
				"node %s sent this snapshot change again %s after it was told its failure %d, by its clock, below that failure's backoff %s",
				o.Node, o.Clock.Sub(t.clock), t.sinceOK, c.backoffBase(t.sinceOK))
		}
	}
	t.latest = o.Request
	nc := snapNodeContent{o.Node, downs, pair, snapContent(o)}
	if id, ok := sp.okTold[nc]; ok && id != o.EventID && c.snapHolds(pair, o) {
		c.report(InvIdempotentReplay, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID)+"\x00snap-renamed",
			"node %s sent %s %s@%s of %s under a new webhook-id after it was told a 2xx of that change under %s, with the app still holding it and no new state of the source handed to an engine since: the receiver cannot drop it as a duplicate",
			o.Node, o.Op, o.Item, o.Version, o.Stream, id)
	}
	for k := range sp.okTold {
		if k.node == o.Node && k.downs == downs && k.pair == pair && k.content != nc.content {
			delete(sp.okTold, k) // a new decision of the pair since
		}
	}
	if n := sp.gaveUp[nc]; n >= c.p.MaxAttempts && c.snapFails[c.key(o.Bot, o.EventID)] < c.p.MaxAttempts {
		c.report(InvBoundedRetry, o.Bot, o.EventID, chkOnce(o.Bot, o.EventID)+"\x00snap-renamed",
			"node %s sent %s %s@%s of %s again under a new webhook-id after it was told %d failures of that change (MaxAttempts=%d), with no new state of the source handed to an engine and no 2xx of the app since",
			o.Node, o.Op, o.Item, o.Version, o.Stream, n, c.p.MaxAttempts)
	}
	sp.waits = slices.DeleteFunc(sp.waits, func(w *snapWait) bool { return w.pair == pair })
	if !o.Clock.IsZero() {
		c.snapOpen(&snapWait{pair: pair, kind: snapWaitGone, node: o.Node, req: o.Request, at: c.now,
			deadline: c.now.Add(c.snapVirtual(o.Node, o.Clock, c.giveUpBound()) + snapSlack)})
	}
}

// snapPromptResult: an answer reached the node that sent the change.
func (c *checker) snapPromptResult(o *Observation) {
	o = c.unstep(o) // clock waits of one node (check_clockjump.go)
	sp := &c.sprompt
	info := sp.reqs[o.Request]
	if info == nil {
		return
	}
	delete(sp.reqs, o.Request)
	sp.outstanding[info.pair]--
	sp.waits = slices.DeleteFunc(sp.waits, func(w *snapWait) bool { return w.kind == snapWaitGone && w.req == o.Request })
	if !o.OK {
		sp.fails[info.pair.bot] = append(sp.fails[info.pair.bot], c.now)
	} else {
		for k := range sp.gaveUp {
			if k.pair == info.pair {
				delete(sp.gaveUp, k)
			}
		}
	}
	if info.node != o.Node || info.downs != c.node(o.Node).downs {
		return
	}
	t := sp.ids[snapNodeID{info.node, info.downs, c.key(info.pair.bot, info.id)}]
	if t == nil || t.latest != o.Request {
		return // an older request of the id: its answer may be ignored
	}
	if o.OK {
		sp.okTold[snapNodeContent{info.node, info.downs, info.pair, info.content}] = info.id
		t.sinceOK = 0
		if !c.snapRetryOpen(info.pair) {
			c.snapOpen(&snapWait{pair: info.pair, kind: snapWaitNext, node: o.Node, at: c.now, deadline: c.now.Add(snapSlack)})
		}
		return
	}
	t.total++
	t.sinceOK++
	t.clock = o.Clock
	nc := snapNodeContent{info.node, info.downs, info.pair, info.content}
	sp.gaveUp[nc]++
	if permanentAnswer(o) {
		// The policy gives the change up at once (impl.PermanentStatus):
		// it waits for the source's next state, as after MaxAttempts.
		t.total = max(t.total, c.p.MaxAttempts)
		sp.gaveUp[nc] = max(sp.gaveUp[nc], c.p.MaxAttempts)
	}
	hi := c.backoffBase(t.total)
	window := c.snapVirtual(o.Node, o.Clock, c.jitterTop(hi)) + snapSlack
	sp.retryUntil[info.pair] = c.now.Add(window)
	if t.total < c.p.MaxAttempts {
		c.snapOpen(&snapWait{pair: info.pair, kind: snapWaitRetry, node: o.Node, id: info.id, at: c.now, deadline: c.now.Add(window)})
	}
}

// snapFed: the snapshot worker handed o.Node the current state of source
// o.Stream: every app of it that lacks that state is owed a change.
func (c *checker) snapFed(o *Observation) {
	sp := &c.sprompt
	for k := range sp.gaveUp {
		if k.pair.event == o.Stream {
			delete(sp.gaveUp, k)
		}
	}
	for k := range sp.okTold {
		if k.pair.event == o.Stream {
			delete(sp.okTold, k)
		}
	}
	src := c.snap.sources[o.Stream]
	if src == nil {
		return
	}
	for _, app := range src.apps {
		pair := c.key(app, o.Stream)
		if c.snapRetryOpen(pair) || sp.outstanding[pair] > 0 {
			continue // the engine acts on the answer, or at the retry
		}
		deadline := c.now.Add(snapSlack)
		if u := sp.retryUntil[pair]; u.After(deadline) {
			deadline = u // a change the engine may not have given up on yet
		}
		c.snapOpen(&snapWait{pair: pair, kind: snapWaitFeed, node: o.Node, at: c.now, deadline: deadline})
	}
}

func (c *checker) snapOpen(w *snapWait) {
	w.epoch = c.sprompt.epoch
	c.sprompt.waits = append(c.sprompt.waits, w)
}

func (c *checker) snapRetryOpen(pair chkKey) bool {
	for _, w := range c.sprompt.waits {
		if w.pair == pair && w.kind == snapWaitRetry {
			return true
		}
	}
	return false
}

// snapVirtual turns d on node's clock into simulated time at node's rate
// since its boot, sampled now at the answer's clock reading.
func (c *checker) snapVirtual(node string, clock time.Time, d time.Duration) time.Duration {
	rate := 0.5
	if b, ok := c.sprompt.boots[node]; ok && !b.clock.IsZero() && !clock.IsZero() {
		if dv := c.now.Sub(b.at); dv >= time.Millisecond {
			if r := float64(clock.Sub(b.clock)) / float64(dv); r > 0 {
				rate = r
			}
		}
	}
	return time.Duration(math.Ceil(float64(d) / rate))
}

// snapNodeUp / snapNodeDown: a crash or a boot voids every open wait; a
// crashed incarnation's requests are never answered to it.
func (c *checker) snapNodeUp(o *Observation) {
	c.sprompt.epoch++
	c.sprompt.boots[o.Node] = snapBoot{at: o.Time, clock: o.Clock}
}

func (c *checker) snapNodeDown(node string) {
	sp := &c.sprompt
	sp.epoch++
	for req, info := range sp.reqs {
		if info.node == node {
			sp.outstanding[info.pair]--
			delete(sp.reqs, req)
		}
	}
	delete(sp.boots, node)
}

// snapStoreFault moves every open deadline: the engine retries a failed
// store call after StoreRetry.
func (c *checker) snapStoreFault() {
	for _, w := range c.sprompt.waits {
		w.deadline = w.deadline.Add(4 * c.p.StoreRetry)
	}
}

// snapHolds: the app holds what change o would give it.
func (c *checker) snapHolds(pair chkKey, o *Observation) bool {
	it := c.snap.apps[pair][o.Item]
	if o.Op == "DELETE" {
		return it == nil || !it.present
	}
	return it != nil && it.present && it.version == o.Version
}

// snapInSync: the app holds exactly the source's current state.
func (c *checker) snapInSync(pair chkKey) bool {
	src := c.snap.sources[pair.event]
	if src == nil {
		return true
	}
	have := 0
	for id, it := range c.snap.apps[pair] {
		if !it.present {
			continue
		}
		if v, ok := src.items[id]; !ok || v != it.version {
			return false
		}
		have++
	}
	return have == len(src.items)
}

// snapDue judges the waits whose deadline is before now.
func (c *checker) snapDue(now time.Time) {
	sp := &c.sprompt
	if len(sp.waits) == 0 {
		return
	}
	var due []*snapWait
	sp.waits = slices.DeleteFunc(sp.waits, func(w *snapWait) bool {
		if w.deadline.Before(now) {
			due = append(due, w)
			return true
		}
		return false
	})
	for _, w := range due {
		c.snapJudge(w)
	}
}

func (c *checker) snapJudge(w *snapWait) {
	sp := &c.sprompt
	out := sp.outstanding[w.pair]
	if w.kind == snapWaitGone {
		if sp.reqs[w.req] == nil {
			return // answered after all, or its node went down
		}
		out-- // the request given up on
	}
	switch {
	case w.epoch != sp.epoch, out > 0, c.snapInSync(w.pair), c.snapBreakerExcuse(w):
		return
	case w.kind != snapWaitRetry && c.snapRetryOpen(w.pair):
		return
	}
	app, source := w.pair.bot, w.pair.event
	switch w.kind {
	case snapWaitRetry:
		c.report(InvRetryBackoff, app, w.id, chkOnce(app, w.id)+"\x00snap-late",
			"node %s was told a failure of this snapshot change at %s and no node sent %s a change of %s within %s (the backoff with jitter on the node's clock, plus %s), while the app still lacked the source's state, with no crash, store fault or run of failures of the app to excuse it",
			w.node, w.at.UTC().Format(time.RFC3339Nano), app, source, w.deadline.Sub(w.at), snapSlack)
	case snapWaitNext:
		c.report(InvSnapshotProgress, app, "", chkOnce(app, source)+"\x00next",
			"node %s was told a 2xx of a change of %s at %s and no node sent the app its next change within %s, while it still lacked the source's state, with no crash or store fault to excuse it",
			w.node, source, w.at.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.at))
	case snapWaitFeed:
		c.report(InvSnapshotProgress, app, "", chkOnce(app, source)+"\x00feed",
			"the state of %s was handed to node %s at %s and no node sent the app, which lacked it, a change within %s, with no request of it in flight, no retry pending and no crash or store fault to excuse it",
			source, w.node, w.at.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.at))
	case snapWaitGone:
		c.report(InvSnapshotProgress, app, "", chkOnce(app, source)+"\x00given-up",
			"node %s sent the app a change of %s at %s and was never told its answer; no node sent the app, which lacked the source's state, a change within %s (the lease plus a cleanup interval on the node's clock, by when the engine gives the request up, plus %s), with no other request of it in flight, no retry pending and no crash or store fault to excuse it",
			w.node, source, w.at.UTC().Format(time.RFC3339Nano), w.deadline.Sub(w.at), snapSlack)
	}
}

// snapBreakerExcuse: the app's bot had a run of failures around the wait,
// or a node's breaker for it left the closed state since it opened.
func (c *checker) snapBreakerExcuse(w *snapWait) bool {
	bot := w.pair.bot
	if t, ok := c.prompt.breakerAt[bot]; ok && !t.Before(w.at) {
		return true
	}
	if c.p.BreakerFailures <= 0 {
		return false
	}
	from := w.at.Add(-c.p.BreakerOpenFor)
	n := 0
	for _, list := range [][]time.Time{c.prompt.fails[bot], c.sprompt.fails[bot]} {
		for _, t := range list {
			if !t.Before(from) && !t.After(w.deadline) {
				n++
			}
		}
	}
	return n >= c.p.BreakerFailures
}

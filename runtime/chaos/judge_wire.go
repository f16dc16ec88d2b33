// The rules judged with the declared settings (PROTOCOL.md, "Rules judged
// with the declared settings"): retry-backoff, in-flight-limit,
// resume-from-cursor, reported-counters and retention-bounds
// (retention.go). Each is a bound the harness
// can see from where it stands, taken so that an engine keeping its
// declared settings can never fail it: what the bots see of a request is
// inside what the engine saw of it (a request reaches a bot after it was
// sent, and its answer leaves the bot before the engine reads it), except
// where a rule states its slack.

package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Slacks the rules allow (PROTOCOL.md states each beside its rule).
const (
	// backoffSlack: a retry may come this much sooner than its backoff
	// (clocks read at millisecond resolution, a store's timestamps).
	backoffSlack = 10 * time.Millisecond
	// transitSlack: how long a request may take to reach a bot, for the
	// breaker's open period (timed from the engine learning a failure).
	transitSlack = 100 * time.Millisecond
	// counterSlack: a counter may lag the wire by what happened this
	// recently before the reading.
	counterSlack = time.Second
)

// judgeWire adds the verdicts of the rules judged with the declared
// settings; r.mu is held.
func judgeWire(j *judgement, r *recorder, p judgeParams) {
	for _, c := range r.wireRules(p) {
		if c.why != "" {
			j.notJudged(c.inv, c.why)
		} else {
			j.judged(c.inv, c.vs)
		}
	}
}

// wireRule is one rule's outcome on a run: its violations, how many
// cases it judged (WireCases), or why it could not be judged.
type wireRule struct {
	inv   string
	vs    []oracle.Violation
	cases int
	why   string
}

// wireRules runs every rule judged with the declared settings; r.mu is held.
func (r *recorder) wireRules(p judgeParams) []wireRule {
	var out []wireRule
	add := func(inv string, vs []oracle.Violation, n int) {
		out = append(out, wireRule{inv: inv, vs: vs, cases: n})
	}
	vs, n := r.retryBackoff(p)
	add(oracle.InvRetryBackoff, vs, n)
	vs, n = r.inFlight(p)
	add(oracle.InvInFlightLimit, vs, n)
	switch {
	case !p.Breaker:
		out = append(out, wireRule{inv: oracle.InvBreakerPolicy, why: "the engine declares no circuit breaker (chaos --breaker declared)"})
	case breakerJudgeable(p.Declared):
		vs, n = r.breakerPolicy(p)
		add(oracle.InvBreakerPolicy, vs, n)
	default:
		out = append(out, wireRule{inv: oracle.InvBreakerPolicy, why: fmt.Sprintf("the declared breaker (failures %d, open for %s) leaves no open period longer than the %s the wire needs to judge it", p.Declared.BreakerFailures, p.Declared.BreakerOpenFor, breakerLearnSlack(p.Declared)+transitSlack)})
	}
	restarted := false
	for _, k := range r.kills {
		restarted = restarted || !k.up.IsZero()
	}
	if restarted {
		vs, n = r.resumeFrom(p)
		add(oracle.InvResumeFromCursor, vs, n)
	} else {
		out = append(out, wireRule{inv: oracle.InvResumeFromCursor, why: "the engine was never restarted in this run"})
	}
	if why := retentionWhy(p); why != "" {
		out = append(out, wireRule{inv: oracle.InvRetentionBounds, why: why})
	} else {
		vs, n = r.retentionBounds(p)
		add(oracle.InvRetentionBounds, vs, n)
	}
	if len(r.scrapeReads) > 0 || !r.finalScrape.at.IsZero() {
		vs, n = r.reportedCounters(p)
		add(oracle.InvReportedCounters, vs, n)
	} else {
		out = append(out, wireRule{inv: oracle.InvReportedCounters, why: "the engine served no /metrics with deliverysim_engine_acked_total and deliverysim_engine_sent_total"})
	}
	return out
}

// learnableFrom is the first instant the engine could have learned q's
// outcome: when the bot began writing the answer (answered, read after
// the flush, can be late on a loaded machine).
func learnableFrom(q *request) time.Time {
	if !q.writing.IsZero() {
		return q.writing
	}
	return q.answered
}

// answeredBeforeLearned: q's answer is an instant the bot wrote before the
// engine could read it (a status, a rejection, a reset connection), so the
// engine learned q's outcome no sooner than q.answered. A timeout is timed
// from the engine's send, which the bots do not see.
func answeredBeforeLearned(q *request) bool {
	switch q.outcome {
	case outStatus, outRejected, outReset:
		return !q.answered.IsZero()
	}
	return false
}

// backoffFloor is the least wait after an engine's n-th failed attempt at a
// message (1-based) under the declared settings: the backoff with no
// jitter, which never shrinks as n grows.
func backoffFloor(c engine.Config, n int) time.Duration {
	return engine.Backoff(c, n, 0)
}

// failuresKnown counts the failed attempts at a message that the process
// alive at reqs[i] surely knows of when it reads reqs[i]'s answer: those
// it sent and learned since the last 2xx it learned, none of them near a
// database fault (the engine may not have recorded those). An engine
// counts at least these (it may carry more across a restart), so the
// backoff after reqs[i] is at least backoffFloor of this count.
func (r *recorder) failuresKnown(reqs []*request, i int, p judgeParams) int {
	inc := r.incarnation(reqs[i].at)
	n := 0
	for _, q := range reqs[:i+1] {
		if r.incarnation(q.at) != inc {
			continue
		}
		switch {
		case r.learned2xx(q, p):
			n = 0
		case failedAttempt(q, p) && r.learned(q, p) && r.dbFaultNear(q, storeGrace(p), nil) < 0:
			n++
		}
	}
	return n
}

// retryBackoff: after a failed attempt whose answer the engine read, the
// same process sends that message again no sooner than the backoff of the
// failures it surely counted (backoffFloor, less backoffSlack), measured
// from the bot's answer. Not judged for a pair with a database fault near
// (the failure may be unrecorded), a membership change of the stream in
// between, or a process the upstream served the event as a replay or a
// duplicate (replayedTo: a second hand-off's first send is no retry of the
// first's; seen on the reference with direct hand-off, seed 13).
func (r *recorder) retryBackoff(p judgeParams) (out []oracle.Violation, cases int) {
	reqs := r.byKey()
	for _, k := range slices.SortedFunc(maps.Keys(reqs), key.compare) {
		qs := reqs[k]
		e := r.events[k.event]
		if e == nil {
			continue
		}
		for i, q := range qs {
			if !answeredBeforeLearned(q) || !r.learned(q, p) {
				continue
			}
			inc := r.incarnation(q.at)
			var next *request
			for _, n := range qs[i+1:] {
				if !n.at.Before(learnableFrom(q)) && r.incarnation(n.at) == inc {
					next = n
					break
				}
			}
			if next == nil || r.dbFaultIn(q.at, next.at, storeGrace(p)) || r.membershipChangedIn(e.stream, q.at, next.at) || r.replayedTo(e, next.at) {
				continue
			}
			cases++
			n := max(r.failuresKnown(qs, i, p), 1)
			floor := backoffFloor(p.Declared, n)
			if gap := next.at.Sub(learnableFrom(q)); gap < floor-backoffSlack {
				out = append(out, r.violation(oracle.InvRetryBackoff, k.bot, k.event,
					"the bot answered failed attempt %d (as the process surely counted them) at %s and the same process sent it again at %s, %s later: below the declared backoff %s (initial backoff %s, multiplier %v, max %s, no jitter, less %s of slack); %s",
					n, r.rel(learnableFrom(q)), r.rel(next.at), gap.Round(time.Millisecond), floor, p.Declared.InitialBackoff, p.Declared.Multiplier, p.Declared.MaxBackoff, backoffSlack, r.history(k, qs)))
				break
			}
		}
	}
	return out, cases
}

// group is one bot as one engine process (incarnation) saw it: the rules
// that count per process keep their tallies by group.
type group struct {
	bot string
	inc int
}

// compare orders groups by bot, then incarnation: verdicts must not
// depend on map order.
func (g group) compare(o group) int {
	return cmp.Or(strings.Compare(g.bot, o.bot), cmp.Compare(g.inc, o.inc))
}

// openSpan is the part of q's life the engine surely had it open: from
// the bot receiving it to the bot beginning its answer (learnableFrom: the
// time read after the flush is late on a loaded machine, and the engine
// may free the slot as soon as the status line arrives), but never past half the
// webhook timeout after the bot received it. The engine's timeout runs
// from its send, which no bot sees; on a loaded machine a request can
// spend 100 ms and more between the engine's send and the bot, so the
// engine may have given up (and freed the slot) long before the bot's
// clock says the timeout is up. Half the timeout is the transit a run may
// take before this rule could fail a correct engine (a Node.js engine at
// load 13 was failed with a 100 ms allowance). ok is false for a request
// with no answer (the process died with it open, or the run ended): it is
// not counted.
func openSpan(q *request, p judgeParams) (from, to time.Time, ok bool) {
	if q.outcome == outNone {
		return time.Time{}, time.Time{}, false
	}
	end := q.at.Add(p.WebhookTimeout / 2)
	if l := learnableFrom(q); !l.IsZero() && l.Before(end) {
		end = l
	}
	return q.at, end, end.After(q.at)
}

// inFlight: the requests one process had open to one bot at once, as the
// bots saw them (openSpan), never exceed the declared limit.
func (r *recorder) inFlight(p judgeParams) (out []oracle.Violation, atLimit int) {
	limit := p.Declared.MaxInFlightPerBot
	if limit <= 0 {
		return nil, 0
	}
	type edge struct {
		t     time.Time
		delta int
		q     *request
	}
	spans := map[group][]edge{}
	for _, q := range r.requests {
		from, to, ok := openSpan(q, p)
		if !ok {
			continue
		}
		g := group{q.bot, r.incarnation(q.at)}
		spans[g] = append(spans[g], edge{from, 1, q}, edge{to, -1, q})
	}
	groups := slices.SortedFunc(maps.Keys(spans), group.compare)
	for _, g := range groups {
		es := spans[g]
		// Ends before starts at the same instant: a slot freed and taken.
		sort.SliceStable(es, func(i, j int) bool {
			if !es[i].t.Equal(es[j].t) {
				return es[i].t.Before(es[j].t)
			}
			return es[i].delta < es[j].delta
		})
		open, peak := 0, 0
		for _, e := range es {
			open += e.delta
			peak = max(peak, open)
			if open > limit {
				out = append(out, r.violation(oracle.InvInFlightLimit, g.bot, e.q.event,
					"%d requests from one engine process were open at %s at once (the request for %s arrived at %s), above the declared max in flight per bot %d (a request counts from the bot receiving it to the bot beginning its answer, for at most half the webhook timeout %s)",
					open, g.bot, e.q.event, r.rel(e.t), limit, p.WebhookTimeout))
				break
			}
		}
		if peak >= limit {
			atLimit++
		}
	}
	return out, atLimit
}

// resumeFrom: where a new process's subscription of a stream starts. Of
// the opening fetches of the stream the process made before it was served
// anything new (an event past every one the earlier processes were
// served), the one starting highest is its resume from its durable cursor
// (a backfill reads from behind it; a later subscription may start from a
// cursor the process made itself). It must not start past every event the
// earlier processes were served (they cannot have made a cursor beyond
// what they read durable: the resume would skip the events between), and
// not behind the last cursor the observation endpoint showed before the
// kill (less the declared lookback on a timestamp stream, and a
// millisecond).
func (r *recorder) resumeFrom(p judgeParams) (out []oracle.Violation, cases int) {
	streams := make([]string, 0, len(r.streams))
	for s := range r.streams {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	for i, k := range r.kills {
		if k.up.IsZero() {
			continue
		}
		for _, stream := range streams {
			maxServed, servedAny, newAt := r.servedBefore(stream, k)
			until := newAt // the window: until the process was served something new
			if i+1 < len(r.kills) && (until.IsZero() || r.kills[i+1].at.Before(until)) {
				until = r.kills[i+1].at
			}
			var top *fetch
			for j := range r.fetches {
				f := &r.fetches[j]
				if f.stream != stream || f.at.Before(k.up) || (!until.IsZero() && !f.at.Before(until)) {
					continue
				}
				if top == nil || startsAbove(f, top) {
					top = f
				}
			}
			if top == nil {
				continue
			}
			cases++
			if v, bad := r.resumedPast(top, k, maxServed, servedAny); bad {
				out = append(out, r.violation(oracle.InvResumeFromCursor, "", "", "%s", v))
				continue
			}
			if c, at, ok := r.cursorBefore(stream, k.at); ok && !top.head {
				floor := r.resumeFloor(stream, c, top, p)
				if top.start.Compare(floor) < 0 {
					out = append(out, r.violation(oracle.InvResumeFromCursor, "", "",
						"the process started at %s (after the kill at %s) resumed %s from %s at the highest, behind the durable cursor %s the observation endpoint showed at %s%s",
						r.rel(k.up), r.rel(k.at), stream, fetchString(top), posString(c), r.rel(at), lookbackNote(top, p)))
				}
			}
		}
	}
	return out, cases
}

// resumeFloor is the lowest start a resume from the durable cursor c may
// have: c itself on a log stream, c less the declared lookback and a
// millisecond on a timestamp stream, or lower still where a backfill may be
// pending: a membership made before the fetch whose from is behind c,
// made when the stream already held an event past its from (the engine
// may resume from the backfill's start: PROTOCOL.md, Observation).
func (r *recorder) resumeFloor(stream string, c impl.Position, top *fetch, p judgeParams) impl.Position {
	lookback := p.Declared.TimestampLookback.Milliseconds() + 1
	floor := c
	if top.since {
		floor = impl.Position{Major: c.Major - lookback}
	}
	for _, m := range r.streams[stream] {
		if !m.member || !m.at.Before(top.at) || m.from.Compare(c) >= 0 || !r.heldPast(stream, m.from, m.at) {
			continue
		}
		f := m.from
		if top.since {
			f = impl.Position{Major: m.from.Major - lookback}
		}
		if f.Compare(floor) < 0 {
			floor = f
		}
	}
	return floor
}

// heldPast reports whether the stream held an event past from before t.
func (r *recorder) heldPast(stream string, from impl.Position, t time.Time) bool {
	for _, id := range r.order {
		e := r.events[id]
		if e.at.After(t) {
			break
		}
		if e.stream == stream && e.pos.Compare(from) > 0 {
			return true
		}
	}
	return false
}

// servedBefore is the furthest event of stream served before the kill k
// ended its process (servedAny false: none was), and when the process
// started after it was first served an event past that one (zero: never).
func (r *recorder) servedBefore(stream string, k kill) (maxServed impl.Position, servedAny bool, newAt time.Time) {
	for _, id := range r.order {
		e := r.events[id]
		if e.stream != stream || len(e.served) == 0 || !e.served[0].Before(k.reaped) {
			continue
		}
		if !servedAny || e.pos.Compare(maxServed) > 0 {
			maxServed, servedAny = e.pos, true
		}
	}
	for _, id := range r.order {
		e := r.events[id]
		if e.stream != stream || (servedAny && e.pos.Compare(maxServed) <= 0) {
			continue
		}
		for _, s := range e.served {
			if !s.Before(k.up) && (newAt.IsZero() || s.Before(newAt)) {
				newAt = s
			}
		}
	}
	return maxServed, servedAny, newAt
}

// startsAbove: f starts later in the stream than g (from=head is the latest).
func startsAbove(f, g *fetch) bool {
	switch {
	case g.head:
		return false
	case f.head:
		return true
	}
	return f.start.Compare(g.start) > 0
}

// resumedPast says whether top, the resume of the process started after
// the kill k, starts past everything the earlier processes were served of
// its stream, and how.
func (r *recorder) resumedPast(top *fetch, k kill, maxServed impl.Position, servedAny bool) (string, bool) {
	if top.head {
		// from=head skips every event already produced: one produced
		// before the fetch that no earlier process was served is lost to it.
		for _, id := range r.order[:top.produced] {
			e := r.events[id]
			if e.stream == top.stream && (len(e.served) == 0 || !e.served[0].Before(k.reaped)) {
				return fmt.Sprintf("the process started at %s (after the kill at %s) subscribed to %s from the head, skipping %s (produced %s, never served to an earlier process, so past any cursor it could have made durable)",
					r.rel(k.up), r.rel(k.at), top.stream, id, r.rel(e.at)), true
			}
		}
		return "", false
	}
	if !servedAny {
		return "", false
	}
	past := top.start.Compare(maxServed) > 0
	if top.since {
		past = top.start.Major > maxServed.Major
	}
	if past {
		return fmt.Sprintf("the process started at %s (after the kill at %s) resumed %s from %s, past %s, the furthest event the earlier processes were served: no durable cursor can be there",
			r.rel(k.up), r.rel(k.at), top.stream, fetchString(top), posString(maxServed)), true
	}
	return "", false
}

// cursorBefore is the last cursor of stream the observation endpoint
// showed before t.
func (r *recorder) cursorBefore(stream string, t time.Time) (impl.Position, time.Time, bool) {
	var pos impl.Position
	var at time.Time
	ok := false
	for _, c := range r.cursorReads {
		if !c.at.Before(t) {
			break
		}
		for _, cu := range c.cursors {
			if cu.Stream == stream {
				pos, at, ok = cu.Pos.Pos(), c.at, true
			}
		}
	}
	return pos, at, ok
}

func fetchString(f *fetch) string {
	switch {
	case f.head:
		return "the head"
	case f.since:
		return fmt.Sprintf("since=%d", f.start.Major)
	}
	return "after=" + posString(f.start)
}

func lookbackNote(f *fetch, p judgeParams) string {
	if f.since {
		return fmt.Sprintf(" less the declared lookback %s", p.Declared.TimestampLookback)
	}
	return ""
}

// reportedCounters: /metrics agrees with the wire. Upper bound: the acked
// counter, summed over processes (each one's highest reading), never
// exceeds the 2xx answers the bots gave. Lower bound, on the reading taken
// after the settle: the last process counts at least the requests it sent
// after the heal, and the 2xx answers it got to them within its timeout,
// that reached the bots more than counterSlack before the reading.
func (r *recorder) reportedCounters(p judgeParams) (out []oracle.Violation, cases int) {
	most := map[int]scrape{}
	for _, s := range r.scrapeReads {
		inc := r.incarnation(s.at)
		m := most[inc]
		m.acked, m.sent = max(m.acked, s.acked), max(m.sent, s.sent)
		most[inc] = m
	}
	if f := r.finalScrape; !f.at.IsZero() {
		inc := r.incarnation(f.at)
		m := most[inc]
		m.acked, m.sent = max(m.acked, f.acked), max(m.sent, f.sent)
		most[inc] = m
	}
	var acked float64
	for _, m := range most {
		acked += m.acked
	}
	oks := 0
	for _, q := range r.requests {
		if q.outcome == outOK {
			oks++
		}
	}
	oks += r.snap.oks // snapshot changes are acknowledged messages too
	if acked > float64(oks) {
		out = append(out, r.violation(oracle.InvReportedCounters, "", "",
			"deliverysim_engine_acked_total summed over the engine's processes reached %v, above the %d 2xx answers the bots gave", acked, oks))
	}
	cases = len(most)
	f := r.finalScrape
	if f.at.IsZero() || r.healAt.IsZero() {
		return out, cases
	}
	inc := r.incarnation(f.at)
	sent, got := 0, 0
	for _, q := range r.requests {
		if r.incarnation(q.at) != inc || q.at.Before(r.healAt) || !q.at.Before(f.at.Add(-counterSlack)) {
			continue
		}
		sent++
		if gave2xx(q, p) && q.answered.Before(f.at.Add(-counterSlack)) {
			got++
		}
	}
	if f.sent < float64(sent) {
		out = append(out, r.violation(oracle.InvReportedCounters, "", "",
			"after the settle the last process's deliverysim_engine_sent_total read %v, below the %d requests the bots received from it after the heal and more than %s before the reading", f.sent, sent, counterSlack))
	}
	if f.acked < float64(got) {
		out = append(out, r.violation(oracle.InvReportedCounters, "", "",
			"after the settle the last process's deliverysim_engine_acked_total read %v, below the %d 2xx answers it got within its timeout after the heal, more than %s before the reading", f.acked, got, counterSlack))
	}
	return out, cases
}

// breakerLearnSlack is how long after a bot began writing an answer
// (learnableFrom) the engine may take to read it and act on it:
// breaker-policy's open period is judged from then. Half the declared
// open period: a fixed 300 ms assumed the engine acts within 300 ms, and a
// loaded machine holds a process longer than that (in-flight-limit gives
// half the webhook timeout for the same reason).
func breakerLearnSlack(c engine.Config) time.Duration { return c.BreakerOpenFor / 2 }

// breakerJudgeable: the declared open period leaves a window to judge
// once the learn and transit slacks are taken off.
func breakerJudgeable(c engine.Config) bool {
	return c.BreakerFailures > 0 && c.BreakerOpenFor > breakerLearnSlack(c)+transitSlack
}

// breakerPolicy: once a bot has answered one process the declared
// breaker-failures failed attempts in a row (in the order the bot began
// writing the answers; every failed attempt counts, a 2xx ends the row,
// and a failure written less than breakerLearnSlack after a 2xx does not
// count: the engine may read it first), that process sends the bot at
// most one request (a probe) between breakerLearnSlack after the bot began
// writing the last of them and the declared open period less transitSlack
// after it. Every instant is learnableFrom's: the time read after the
// bot's flush can be late on a loaded machine. Not judged for a row with
// a database fault near it, a 2xx from the bot to the process after the
// row's last failure up to the window's end, or a kill before the window
// ends.
func (r *recorder) breakerPolicy(p judgeParams) (out []oracle.Violation, cases int) {
	c := p.Declared
	slack := breakerLearnSlack(c)
	byGroup := map[group][]*request{}
	for _, q := range r.requests {
		g := group{q.bot, r.incarnation(q.at)}
		byGroup[g] = append(byGroup[g], q)
	}
	groups := slices.SortedFunc(maps.Keys(byGroup), group.compare)
	for _, g := range groups {
		qs := byGroup[g]
		answered := make([]*request, 0, len(qs))
		for _, q := range qs {
			if q.outcome != outNone && !q.answered.IsZero() {
				answered = append(answered, q)
			}
		}
		sort.SliceStable(answered, func(i, j int) bool { return learnableFrom(answered[i]).Before(learnableFrom(answered[j])) })
		streak := 0
		var last2xx time.Time
		var after time.Time // the last window judged ends here
		for _, q := range answered {
			w := learnableFrom(q)
			if !w.After(after) {
				continue
			}
			switch {
			case gave2xx(q, p):
				streak, last2xx = 0, w
				continue
			case !failedAttempt(q, p) || !r.learned(q, p):
				continue
			case !last2xx.IsZero() && w.Before(last2xx.Add(slack)):
				// The engine may read this failure before the 2xx
				// answered just before it: it may not count toward the row.
				continue
			}
			streak++
			if streak < c.BreakerFailures {
				continue
			}
			streak = 0
			from, to := w.Add(slack), w.Add(c.BreakerOpenFor-transitSlack)
			after = w.Add(c.BreakerOpenFor)
			if k := r.killEnding(q.at); k != nil && k.at.Before(to) {
				continue
			}
			if r.dbFaultIn(w.Add(-c.BreakerOpenFor-storeGrace(p)), to, storeGrace(p)) {
				continue
			}
			ok2xx, sent := false, 0
			var second *request
			for _, o := range qs {
				if gave2xx(o, p) && learnableFrom(o).After(w) && !learnableFrom(o).After(to) {
					ok2xx = true
				}
				if o.at.After(from) && !o.at.After(to) {
					sent++
					if sent == 2 {
						second = o
					}
				}
			}
			if ok2xx {
				continue
			}
			cases++
			if second == nil {
				continue
			}
			out = append(out, r.violation(oracle.InvBreakerPolicy, g.bot, second.event,
				"the bot answered %d failed attempts in a row by %s (declared breaker failures %d), and the same process sent it %d requests from %s to %s (the open period %s, less %s, half of it, to read the answer and %s of transit): at most one probe",
				c.BreakerFailures, r.rel(w), c.BreakerFailures, sent, r.rel(from), r.rel(to), c.BreakerOpenFor, slack, transitSlack))
			break
		}
	}
	return out, cases
}

// The judge: every verdict is computed from what the harness observed
// (the upstream's answers, the registry's history, the wire, the bots'
// handlers, kill and fault times) and from what the engine chose to report
// on the optional observation endpoint. A check that needs what the engine
// does not report is "not judged", with the reason.

package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// Chaos's invariants beside the simulator's names it reuses.
const (
	InvKeyHeld = "key-held" // nothing is sent to a bot before its key is published
)

// Verdict is one invariant's outcome and, when it is not judged, why.
type Verdict struct {
	Invariant string `json:"invariant"`
	Verdict   string `json:"verdict"` // PASS, FAIL or "not judged"
	Why       string `json:"why,omitempty"`
}

// judgeParams are the bounds the engine declared (or the reference runs
// with) and the run's own.
type judgeParams struct {
	MaxAttempts    int
	WebhookTimeout time.Duration
	Lease          time.Duration
	StoreRetry     time.Duration
	// KillWindow: an answer that reached the engine less than this long
	// before a SIGKILL belongs to no completed attempt it learned of
	// (PROTOCOL.md, "Kills").
	KillWindow time.Duration
	HOLBound   time.Duration
	Healthy    string // the bot with no faults and a key from the start
	Settle     time.Duration
	// Declared: every setting the engine is declared with (the rules of
	// judge_wire.go read its backoff, in-flight limit, breaker and lookback).
	Declared engine.Config
	// Breaker: the engine declares a circuit breaker (Config.Breaker).
	Breaker bool
	// Snapshots: the engine declares snapshot sources (Config.Snapshots).
	Snapshots bool
	// Retention: the engine declares retention of held messages
	// (Config.Retention): mayDrop and retention-bounds.
	Retention bool
}

type judgement struct {
	verdicts   []Verdict
	violations []oracle.Violation
}

func (j *judgement) judged(inv string, vs []oracle.Violation) {
	v := "PASS"
	if len(vs) > 0 {
		v = "FAIL"
	}
	j.verdicts = append(j.verdicts, Verdict{Invariant: inv, Verdict: v})
	j.violations = append(j.violations, vs...)
}

func (j *judgement) notJudged(inv, why string) {
	j.verdicts = append(j.verdicts, Verdict{Invariant: inv, Verdict: notJudged, Why: why})
}

// judge runs every check on r; r.mu is held.
func judge(r *recorder, p judgeParams) judgement {
	var j judgement
	j.judged(oracle.InvNoSilentLoss, r.losses(p))
	j.judged(oracle.InvNoPhantomDelivery, r.phantoms())
	j.judged(InvKeyHeld, r.keyHeld())
	j.judged(oracle.InvIdempotentReplay, r.replays(p))
	j.judged(oracle.InvBoundedRetry, r.boundedRetry(p))
	j.judged(oracle.InvNoHeadOfLine, r.headOfLine(p))
	j.judged(oracle.InvLiveness, r.liveness(p))

	switch {
	case r.exposesDead():
		j.judged(oracle.InvDeadLetterEarned, r.deadLetterEarned(p))
	default:
		j.notJudged(oracle.InvDeadLetterEarned, "the engine reports no dead_letters on "+observeWhere(r))
	}
	if r.atEnd != nil && r.atEnd.Cursors != nil {
		j.judged(oracle.InvCursorProgress, r.cursorProgress())
		if r.atHeal != nil && r.atHeal.Cursors != nil {
			j.judged(oracle.InvCursorMonotonic, r.cursorMonotonic())
		} else {
			j.notJudged(oracle.InvCursorMonotonic, "the observation endpoint could not be read at the heal")
		}
	} else {
		why := "the engine reports no cursors on " + observeWhere(r)
		j.notJudged(oracle.InvCursorProgress, why)
		j.notJudged(oracle.InvCursorMonotonic, why)
	}
	judgeWire(&j, r, p)
	judgeSnapshots(&j, r, p)
	for _, n := range unjudgedOutside {
		j.notJudged(n[0], n[1])
	}
	return j
}

// liveness: the settle ended with every obligation resolved. It judges
// the settle's own list (settled), taken with the rule the settle waited
// on (resolved), so the two cannot disagree; a message resolved after the
// bound is still one the settle had to give up on.
func (r *recorder) liveness(p judgeParams) []oracle.Violation {
	if len(r.settleOpen) == 0 {
		return nil
	}
	var b strings.Builder
	for i, k := range r.settleOpen {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(r.settleOpen)-i)
			break
		}
		fmt.Fprintf(&b, " %s→%s", k.event, k.bot)
	}
	why := r.settleWhy
	if why == "" {
		why = "the settle bound"
	}
	depth := ""
	if r.atEnd != nil && r.atEnd.QueueDepth != nil {
		depth = fmt.Sprintf("; the engine reports %d messages still queued", *r.atEnd.QueueDepth)
	}
	return []oracle.Violation{r.violation(oracle.InvLiveness, "", "", "%d obligations were still open when the settle gave up (%s), neither handled nor dead-lettered:%s%s", len(r.settleOpen), why, b.String(), depth)}
}

// exposesDead reports whether the engine reports its dead letters: a
// reading of the endpoint listed dead_letters, even empty.
func (r *recorder) exposesDead() bool {
	if r.exposes {
		return true
	}
	for _, o := range []*protocol.Observation{r.atHeal, r.atEnd} {
		if o != nil && o.DeadLetters != nil {
			return true
		}
	}
	return false
}

func observeWhere(r *recorder) string {
	if r.observeNote != "" {
		return "GET /v1/observe (" + r.observeNote + ")"
	}
	return "GET /v1/observe"
}

// unjudgedOutside are the simulator's checks a black-box run cannot
// judge, and why.
var unjudgedOutside = [][2]string{
	{oracle.InvCursorLowWatermark, "needs the engine's queue at each cursor write; a cursor that passes an event not handed off shows as a loss after the next kill (no-silent-loss)"},
	{oracle.InvResendWithCause, "needs the engine's store commits (idempotent-replay judges re-sends after a 2xx from the wire)"},
	{oracle.InvAckedAfterDelivery, "needs the engine's queue rows"},
	{oracle.InvSettingsValidation, "judged by the simulator (sim/settings.go)"},
	{oracle.InvReceiverDedupBounds, "the harness's receivers are impl/receiver, judged by the simulator"},
	{oracle.InvSignedVerify, "judged as signed-requests"},
}

func (r *recorder) violation(inv, bot, event, format string, args ...any) oracle.Violation {
	return oracle.Violation{Invariant: inv, Bot: bot, Event: event, Time: time.Now(), Detail: fmt.Sprintf(format, args...)}
}

// rel is t as an offset from the run's start, the unit of the printed plan.
func (r *recorder) rel(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(r.start).Seconds())
}

// incarnation is the engine process a request received at t came from:
// one received between a kill and the restart was in flight at the kill.
func (r *recorder) incarnation(t time.Time) int {
	n := 0
	for _, k := range r.kills {
		if !k.up.IsZero() && !k.up.After(t) {
			n++
		}
	}
	return n
}

// killEnding is the kill that ended the incarnation alive at t (nil: it
// lived to the end).
func (r *recorder) killEnding(t time.Time) *kill {
	for i := range r.kills {
		if k := &r.kills[i]; k.up.IsZero() || k.up.After(t) {
			return k
		}
	}
	return nil
}

func (r *recorder) dbFaultIn(from, to time.Time, slack time.Duration) bool {
	for _, w := range r.dbFaults {
		if !w.from.After(to) && !w.to.Add(slack).Before(from) {
			return true
		}
	}
	return false
}

func (r *recorder) membershipChangedIn(stream string, from, to time.Time) bool {
	for _, m := range r.streams[stream] {
		if !m.at.Before(from) && !m.at.After(to) {
			return true
		}
	}
	return false
}

// byKey groups the requests per (bot, event), in arrival order.
func (r *recorder) byKey() map[key][]*request {
	out := map[key][]*request{}
	for _, q := range r.requests {
		k := key{q.bot, q.event}
		out[k] = append(out[k], q)
	}
	return out
}

// history is an obligation's wire history, for a reader hunting a loss.
func (r *recorder) history(k key, reqs []*request) string {
	var b strings.Builder
	e := r.events[k.event]
	if e != nil {
		if len(e.served) == 0 {
			b.WriteString("never fetched by the engine")
		} else {
			fmt.Fprintf(&b, "fetched %d times (first %s)", len(e.served), r.rel(e.served[0]))
		}
	}
	if len(reqs) == 0 {
		b.WriteString("; never sent")
	} else {
		fmt.Fprintf(&b, "; %d requests:", len(reqs))
		for i, q := range reqs {
			if i == 8 && len(reqs) > 10 {
				fmt.Fprintf(&b, " ... %d more", len(reqs)-9)
				q = reqs[len(reqs)-1]
			}
			fmt.Fprintf(&b, " %s→%s", r.rel(q.at), describeOutcome(q))
			if k := r.killEnding(q.at); k != nil && k.at.Before(q.at.Add(time.Second)) && (q.outcome == outNone || !q.answered.Before(k.at)) {
				b.WriteString(" (in flight at a kill)")
			}
			if i == 8 && len(reqs) > 10 {
				break
			}
		}
	}
	for _, f := range r.botFaults {
		if f.bot == k.bot && e != nil && f.w.to.After(e.at) {
			fmt.Fprintf(&b, "; bot fault %s %s..%s", modeName(f.mode), r.rel(f.w.from), r.rel(f.w.to))
		}
	}
	for _, m := range r.moves {
		if m.bot == k.bot {
			fmt.Fprintf(&b, "; bot moved to a new URL %s (the old one refused connections 5s later)", r.rel(m.at))
		}
	}
	for _, m := range r.rotations {
		if m.bot == k.bot {
			fmt.Fprintf(&b, "; bot's secret rotated %s", r.rel(m.at))
		}
	}
	if d, ok := r.dead[k]; ok {
		fmt.Fprintf(&b, "; reported dead with %d attempts (%s)", d.attempts, r.rel(d.at))
	} else {
		b.WriteString("; not reported dead")
	}
	return b.String()
}

func describeOutcome(q *request) string {
	switch q.outcome {
	case outOK:
		return "2xx"
	case outStatus:
		return fmt.Sprint(q.status)
	case outTimeout:
		return "timeout"
	case outRejected:
		return fmt.Sprintf("rejected %d", q.status)
	case outReset:
		return "refused"
	case outDropped:
		return "connection gone before the answer"
	}
	return "no answer"
}

// obligations calls f for each (event, bot) owed, in production order.
func (r *recorder) obligations(f func(id string, e *produced, bot string)) {
	for _, id := range r.order {
		e := r.events[id]
		for _, b := range r.bots {
			if r.memberAtLocked(e.stream, b, e.pos) {
				f(id, e, b)
			}
		}
	}
}

func (r *recorder) losses(p judgeParams) []oracle.Violation {
	var out []oracle.Violation
	reqs := r.byKey()
	v := r.retentionView(p)
	r.obligations(func(id string, e *produced, bot string) {
		k := key{bot, id}
		if r.resolved(k, reqs[k], p, v) {
			return
		}
		out = append(out, r.violation(oracle.InvNoSilentLoss, bot, id,
			"owed (member of %s at %s, produced %s) but the bot never handled it and it is not dead-lettered (%s); %s",
			e.stream, posString(e.pos), r.rel(e.at), r.deadReason(k, reqs[k], p), r.history(k, reqs[k])))
	})
	return out
}

func (r *recorder) deadLetterEarned(p judgeParams) []oracle.Violation {
	var out []oracle.Violation
	reqs := r.byKey()
	for _, k := range slices.SortedFunc(maps.Keys(r.dead), key.compare) {
		if why := r.deadReason(k, reqs[k], p); why != "" {
			out = append(out, r.violation(oracle.InvDeadLetterEarned, k.bot, k.event, "%s; %s", why, r.history(k, reqs[k])))
		}
	}
	return out
}

func (r *recorder) phantoms() []oracle.Violation {
	var out []oracle.Violation
	for _, q := range r.requests {
		if q.phantom != "" {
			out = append(out, r.violation(oracle.InvNoPhantomDelivery, q.bot, q.event, "request at %s: %s", r.rel(q.at), q.phantom))
			continue
		}
		e := r.events[q.event]
		if !r.memberAtLocked(e.stream, q.bot, e.pos) {
			out = append(out, r.violation(oracle.InvNoPhantomDelivery, q.bot, q.event,
				"request at %s: the bot is not a member of %s at the event's position %s (unauthorized delivery)", r.rel(q.at), e.stream, posString(e.pos)))
		}
	}
	return out
}

func (r *recorder) keyHeld() []oracle.Violation {
	var out []oracle.Violation
	for _, q := range r.requests {
		if !r.keyless[q.bot] {
			continue
		}
		at, ok := r.keyAt[q.bot]
		if !ok || q.at.Before(at) {
			pub := "never published"
			if ok {
				pub = "published at " + r.rel(at)
			}
			out = append(out, r.violation(InvKeyHeld, q.bot, q.event,
				"sent at %s, before the registry showed the bot's key (has_key false; %s): held events must wait", r.rel(q.at), pub))
		}
	}
	return out
}

// replays: a bot's handler ran twice, or an incarnation sent a request
// again after it learned that bot's 2xx for it, with no cause the world
// shows since (a membership change of the stream, a database fault that
// may have undone the engine's record of the 2xx, the upstream serving the
// process the event as a replay or duplicate: its hand-off may race the
// delivery of the earlier copy).
func (r *recorder) replays(p judgeParams) []oracle.Violation {
	var out []oracle.Violation
	for _, id := range r.order {
		for _, b := range r.bots {
			if n := r.handlerRuns[key{b, id}]; n > 1 {
				out = append(out, r.violation(oracle.InvIdempotentReplay, b, id, "the bot's handler ran %d times", n))
			}
		}
	}
	reqs := r.byKey()
	for _, k := range slices.SortedFunc(maps.Keys(reqs), key.compare) {
		qs := reqs[k]
		e := r.events[k.event]
		if e == nil {
			continue
		}
		for i, ok := range qs {
			if !r.learned2xx(ok, p) {
				continue
			}
			inc := r.incarnation(ok.at)
			for _, again := range qs[i+1:] {
				if again.at.Before(ok.answered) || r.incarnation(again.at) != inc {
					continue
				}
				if r.membershipChangedIn(e.stream, ok.at, again.at) || r.dbFaultIn(ok.at, again.at, 2*p.StoreRetry+time.Second) || r.replayedTo(e, again.at) {
					continue
				}
				out = append(out, r.violation(oracle.InvIdempotentReplay, k.bot, k.event,
					"the same engine process sent it again at %s after the bot answered its request of %s with 2xx at %s (no kill, membership change, database fault or new fetch of the event in between)",
					r.rel(again.at), r.rel(ok.at), r.rel(ok.answered)))
				break
			}
			break
		}
	}
	return out
}

// boundedRetry: once the bots have answered MaxAttempts failures the
// engine learned of (since the message's last 2xx), it sends no more.
// Not counted: a request in flight at a kill or answered within the kill
// window; and, once per database fault, a failure answered during it or
// within storeGrace of it (the engine may have been unable to record that
// one; an engine that retries for ever still runs past the bound).
func (r *recorder) boundedRetry(p judgeParams) []oracle.Violation {
	var out []oracle.Violation
	reqs := r.byKey()
	for _, k := range slices.SortedFunc(maps.Keys(reqs), key.compare) {
		counted := 0
		used := map[int]bool{} // database faults that excused a failure of this message
		for _, q := range reqs[k] {
			if counted >= p.MaxAttempts {
				out = append(out, r.violation(oracle.InvBoundedRetry, k.bot, k.event,
					"sent again at %s after the bot had answered %d failed attempts the engine learned of (declared max attempts %d); %s",
					r.rel(q.at), counted, p.MaxAttempts, r.history(k, reqs[k])))
				break
			}
			switch {
			case gave2xx(q, p):
				counted, used = 0, map[int]bool{}
			case failedAttempt(q, p) && r.learned(q, p):
				if i := r.dbFaultNear(q, storeGrace(p), used); i >= 0 {
					used[i] = true
				} else {
					counted++
				}
			}
		}
	}
	return out
}

// dbFaultNear is the first database fault not in used whose window,
// widened by grace, overlaps q's request and answer (-1: none).
func (r *recorder) dbFaultNear(q *request, grace time.Duration, used map[int]bool) int {
	for i, w := range r.dbFaults {
		if !used[i] && !w.from.Add(-grace).After(q.answered) && !w.to.Add(grace).Before(q.at) {
			return i
		}
	}
	return -1
}

// headOfLine: the healthy bot handles each event within HOLBound of the
// engine first fetching it, beyond allowances for engine downtime, each
// kill (a lease and a timeout) and each database fault.
func (r *recorder) headOfLine(p judgeParams) []oracle.Violation {
	var out []oracle.Violation
	if p.Healthy == "" {
		return nil
	}
	for _, id := range r.order {
		e := r.events[id]
		h, ok := r.firstHandled[key{p.Healthy, id}]
		if !ok || len(e.served) == 0 || h.Before(e.served[0]) {
			continue
		}
		from := e.served[0]
		var allow time.Duration
		for _, k := range r.kills {
			if k.at.After(from.Add(-p.Lease)) && k.at.Before(h) {
				allow += k.up.Sub(k.at) + p.Lease + p.WebhookTimeout
			}
		}
		for _, w := range r.dbFaults {
			if w.to.Add(p.Lease).After(from) && w.from.Before(h) {
				allow += w.to.Sub(w.from) + 2*p.StoreRetry + p.Lease
			}
		}
		if net := h.Sub(from) - allow; net > p.HOLBound {
			out = append(out, r.violation(oracle.InvNoHeadOfLine, p.Healthy, id,
				"the healthy bot handled it %s after the engine first fetched it (%s beyond allowances of %s for kills and database faults), above the bound %s",
				h.Sub(from).Round(time.Millisecond), net.Round(time.Millisecond), allow, p.HOLBound))
		}
	}
	return out
}

func (r *recorder) lastLogEvent(stream string) *produced {
	var last *produced
	for _, id := range r.order {
		if e := r.events[id]; e.stream == stream && e.log && (last == nil || e.pos.Compare(last.pos) > 0) {
			last = e
		}
	}
	return last
}

// cursorProgress: after the settle, each log stream with a member at its
// last event reports a durable cursor at or past that event.
func (r *recorder) cursorProgress() []oracle.Violation {
	var out []oracle.Violation
	streams := make([]string, 0, len(r.streams))
	for s := range r.streams {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	for _, stream := range streams {
		last := r.lastLogEvent(stream)
		if last == nil {
			continue
		}
		member := false
		for _, b := range r.bots {
			member = member || r.memberAtLocked(stream, b, last.pos)
		}
		if !member {
			continue
		}
		got, ok := cursorOf(r.atEnd, stream)
		switch {
		case !ok:
			out = append(out, r.violation(oracle.InvCursorProgress, "", "", "after the settle the engine reports no cursor for %s (its last event is at %s)", stream, posString(last.pos)))
		case got.Compare(last.pos) < 0:
			out = append(out, r.violation(oracle.InvCursorProgress, "", "", "after the settle the engine reports %s's durable cursor at %s, short of its last event at %s", stream, posString(got), posString(last.pos)))
		}
	}
	return out
}

func (r *recorder) cursorMonotonic() []oracle.Violation {
	var out []oracle.Violation
	for _, c := range r.atHeal.Cursors {
		if end, ok := cursorOf(r.atEnd, c.Stream); ok && end.Compare(c.Pos.Pos()) < 0 {
			out = append(out, r.violation(oracle.InvCursorMonotonic, "", "", "%s's durable cursor moved back from %s at the heal to %s after the settle", c.Stream, posString(c.Pos.Pos()), posString(end)))
		}
	}
	return out
}

func cursorOf(o *protocol.Observation, stream string) (impl.Position, bool) {
	if o == nil {
		return impl.Position{}, false
	}
	for _, c := range o.Cursors {
		if c.Stream == stream {
			return c.Pos.Pos(), true
		}
	}
	return impl.Position{}, false
}

func posString(p impl.Position) string {
	if p.ID != "" {
		return fmt.Sprintf("(%d,%d,%s)", p.Major, p.Minor, p.ID)
	}
	return fmt.Sprintf("(%d,%d)", p.Major, p.Minor)
}

func modeName(m int32) string {
	for k, v := range botModes {
		if v == m {
			return string(k)
		}
	}
	return "healthy"
}

// replayedTo reports whether the process alive at t was served e as a
// replay or a duplicate before t: e was served to it and also to an
// earlier process, or served to it twice. Handing off a replayed event
// may race with the delivery of its earlier copy (at-least-once); a
// process that was served an event once has no such excuse.
func (r *recorder) replayedTo(e *produced, t time.Time) bool {
	var from time.Time // when the process alive at t started
	for _, k := range r.kills {
		if !k.up.IsZero() && !k.up.After(t) {
			from = k.up
		}
	}
	before, during := 0, 0
	for _, s := range e.served {
		switch {
		case s.Before(from):
			before++
		case !s.After(t):
			during++
		}
	}
	return during > 1 || (during == 1 && before > 0)
}

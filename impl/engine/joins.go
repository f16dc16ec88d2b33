package engine

import (
	"strconv"
	"strings"

	"github.com/deliverysim/deliverysim/impl"
)

// Memberships that start behind what has been handed off (backfilling
// joins).
//
// A registry entry {stream, bot, from, member} may start behind the
// stream's durable cursor: the bot is owed events that were handed off
// before the engine knew of it. The stream cursor cannot say so (it never
// moves back, and other bots are not owed those events again), so each
// member entry gets a durable marker of its own, a cursor under a key no
// stream uses:
//
//   - done {"join/<stream>", "<bot>#<registry index>"} at the R its writer
//     covered: every event owed through the entry at or before any stream
//     cursor that may become durable from now on was handed off durably,
//     unless a need marker lies beyond it. The registry only grows, so the
//     index names the entry on every node and every boot.
//   - need {"need/<stream>", same}: the furthest event a node had handed off
//     (without the bot) when it learnt of the entry; each such node writes
//     it at once, and the conditional upsert keeps the greatest.
//
// An entry without a done marker is pending. A node covers a pending entry
// once it has handed off, with the bot, every event it handed off without
// it: it re-subscribes the stream from the entry's start (a backfill) and
// hands the replayed events it had handed off before to the bot alone,
// queued (never direct: a crash must not lose them). The replay is complete
// once an event arrives that lies beyond everything the node had received
// when the backfill began (for timestamp streams, beyond it by more than
// the lookback, which covers producer skew): the upstream replays in
// arrival order, and duplicates of earlier batches hold only events it had
// received. The stream has one subscription, so the rewind of a new
// backfill restarts the replay of every other one running: it resumes each
// from how far that replay already got, or from its start if it got
// nowhere yet. An event from the current subscription (beyond everything
// the node had received before it: duplicates of earlier batches may
// still come) shows every event produced before it, from the
// subscription's start on, received and handed off: for log streams those
// at or before it, for timestamp streams those more than the lookback
// before it. That progress is not durable: a boot backfills each pending
// entry from its start. A node that had handed off nothing past the start
// covers the entry at once. A covered node then reads the need marker and the stream
// cursor, R = the greater, in a later step than the one the entry came in
// (so that every node up at the join wrote its need first), and once its
// own hand-offs reach R it writes done. At boot a pending entry whose start
// lies behind the durable cursor is backfilled up to that cursor (a
// replay that turns out needless costs duplicates only), and R comes from
// the same listing.
//
// A node whose need write fails writes no stream cursor until it succeeds:
// its older hand-offs must not carry a cursor past what the other nodes'
// R accounts for. Meanwhile a node that did not see its need (one that
// booted) may write done; a need that lands beyond that done marker's R
// vetoes it, so the entry is pending again at the next boot.

const (
	joinPrefix = "join/"
	needPrefix = "need/"
)

// IsMarker reports whether a stored cursor is one of these per-entry
// markers rather than a stream's resume point: readers of the store that
// report stream cursors (the runtime's observation endpoint) must skip it.
func IsMarker(k impl.CursorKey) bool {
	return strings.HasPrefix(k.Stream, joinPrefix) || strings.HasPrefix(k.Stream, needPrefix)
}

type joinState struct {
	key  string // "<bot>#<registry index>"
	bot  string
	from impl.Position
	made uint64 // the step that made it

	// back: a backfill is running, owed up to end (what the node had
	// received when it began); handed: the events of the range handed
	// off since, with the bot if it is owed them.
	back   bool
	end    impl.Position
	handed map[string]bool
	// prog: the furthest event the stream's replay has proven it reached
	// for this backfill (replayProof): every event of the range before it
	// was received and handed off, so a rewind resumes the backfill there
	// rather than at its start.
	prog    impl.Position
	hasProg bool

	need      impl.Position // this node's exposure, written to the need marker
	needDirty bool          // its write failed: retried before any stream cursor

	hasR bool
	r    impl.Position
	setR bool // r holds a position (else nothing was owed past the start)
}

func joinKey(bot string, idx int) string { return bot + "#" + strconv.Itoa(idx) }

func doneKey(stream, key string) impl.CursorKey {
	return impl.CursorKey{Stream: joinPrefix + stream, Subscriber: key}
}

func needKey(stream, key string) impl.CursorKey {
	return impl.CursorKey{Stream: needPrefix + stream, Subscriber: key}
}

// exposure is the furthest position the node treats as handed off on s:
// the events it has received or handed off in this incarnation, and the
// cursor it knows durable or wants written (at boot, or anchored before any
// event came).
func (s *streamState) exposure() (impl.Position, bool) {
	p, ok := s.high, s.hasHigh
	for _, c := range [...]struct {
		pos impl.Position
		has bool
	}{{s.arrivedMax, s.hasArrived}, {s.durable.Pos, s.hasDurable}, {s.target.Pos, s.hasTarget}} {
		if c.has && (!ok || c.pos.Compare(p) > 0) {
			p, ok = c.pos, true
		}
	}
	return p, ok
}

// joinLive handles a member entry that came while the engine runs.
func (e *Engine) joinLive(s *streamState, idx int, m Membership) {
	j := &joinState{key: joinKey(m.Bot, idx), bot: m.Bot, from: m.From, made: e.stepNo}
	s.joins = append(s.joins, j)
	end, ok := s.exposure()
	if !ok || m.From.Compare(end) >= 0 {
		return // nothing handed off past its start: covered
	}
	j.back, j.end, j.handed, j.need = true, end, map[string]bool{}, end
	e.writeNeed(s, j)
	e.rewind(s)
}

func (e *Engine) writeNeed(s *streamState, j *joinState) bool {
	c := impl.Cursor{Key: needKey(s.id, j.key), Pos: j.need, UpdatedAt: e.now}
	written, err := e.store.AdvanceCursors(e.ctx, []impl.Cursor{c})
	if err != nil {
		j.needDirty = true
		e.retryLater("advance-cursors", err)
		return false
	}
	j.needDirty = false
	e.countMarkers(written)
	return true
}

func (e *Engine) countMarkers(written []bool) {
	for _, w := range written {
		if w {
			e.cnt.CursorWrites++
		}
	}
}

// needPending says whether a need marker of s waits for its write.
func (s *streamState) needPending() bool {
	for _, j := range s.joins {
		if j.needDirty {
			return true
		}
	}
	return false
}

// loadJoins makes the state of s's pending member entries at boot, from
// the markers in the cursor listing.
func (e *Engine) loadJoins(s *streamState, markers map[impl.CursorKey]impl.Position) {
	for _, en := range s.entries {
		if !en.m.Member {
			continue
		}
		key := joinKey(en.m.Bot, en.idx)
		done, okD := markers[doneKey(s.id, key)]
		if need, okN := markers[needKey(s.id, key)]; okD && (!okN || need.Compare(done) <= 0) {
			continue
		}
		j := &joinState{key: key, bot: en.m.Bot, from: en.m.From, made: e.stepNo, hasR: true}
		if need, ok := markers[needKey(s.id, key)]; ok {
			j.r, j.setR = need, true
		}
		if s.hasDurable {
			if !j.setR || s.durable.Pos.Compare(j.r) > 0 {
				j.r, j.setR = s.durable.Pos, true
			}
			if en.m.From.Compare(s.durable.Pos) < 0 {
				j.back, j.end, j.handed = true, s.durable.Pos, map[string]bool{}
			}
		}
		s.joins = append(s.joins, j)
	}
}

// resumeAt is where a rewind must resume j's backfill: its start, or the
// furthest event its replay has proven it reached.
func (j *joinState) resumeAt() impl.Position {
	if j.hasProg && j.prog.Compare(j.from) > 0 {
		return j.prog
	}
	return j.from
}

// rewind re-subscribes s from the earliest point its running backfills
// still need: each one's start, or how far a replay already took it (a
// new join or a boot under churn must not replay again what earlier
// replays handed off: seed 223182, no-head-of-line-blocking).
func (e *Engine) rewind(s *streamState) {
	var from impl.Position
	found := false
	for _, j := range s.joins {
		if at := j.resumeAt(); j.back && (!found || at.Compare(from) < 0) {
			from, found = at, true
		}
	}
	if !found || !s.subscribed {
		return
	}
	sub := Subscribe{Stream: s.id, Kind: s.kind}
	if s.kind == TimestampStream {
		sub.Since = from.Major - e.lookbackMs()
	} else {
		sub.From = from
	}
	s.replayed(from)
	e.out.Subscribes = append(e.out.Subscribes, sub)
}

// replayed books a new subscription of s resuming at from: the upstream
// serves it in production order, but batches that arrived before it may
// still come again (duplicates), so only events beyond everything received
// so far prove how far it got.
func (s *streamState) replayed(from impl.Position) {
	s.repFrom, s.hasRep = from, true
	s.repGuard, s.hasRepGuard = s.arrivedMax, s.hasArrived
}

// replayProof books a hand-off of evs as proof of how far the current
// subscription has got, for the running backfills it covers. An event that
// comes from it (beyond everything received before it) shows every event
// produced before it from the subscription's start on received: for log
// streams those at or before it, for timestamp streams those more than the
// lookback (the producer skew) before it, which a rewind from it covers.
func (s *streamState) replayProof(evs []Event) {
	if !s.hasRep {
		return
	}
	var c impl.Position
	found := false
	for i := range evs {
		p := evs[i].Pos
		if (!s.hasRepGuard || p.Compare(s.repGuard) > 0) && (!found || p.Compare(c) > 0) {
			c, found = p, true
		}
	}
	if !found {
		return
	}
	for _, j := range s.joins {
		if j.back && s.repFrom.Compare(j.resumeAt()) <= 0 && (!j.hasProg || c.Compare(j.prog) > 0) {
			j.prog, j.hasProg = c, true
		}
	}
}

// backWants says whether a running backfill of s (of bot, or of any bot
// if bot is "") still owes the replayed event ev.
func (s *streamState) backWants(bot string, ev *Event) bool {
	for _, j := range s.joins {
		if j.back && (bot == "" || j.bot == bot) && ev.Pos.Compare(j.from) > 0 && ev.Pos.Compare(j.end) <= 0 && !j.handed[ev.ID] {
			return true
		}
	}
	return false
}

// joinsHanded books a successful hand-off of evs for the running
// backfills of s, and ends those whose replay is complete.
func (e *Engine) joinsHanded(s *streamState, evs []Event) {
	s.replayProof(evs)
	for _, j := range s.joins {
		if !j.back {
			continue
		}
		for i := range evs {
			ev := &evs[i]
			if ev.Pos.Compare(j.from) > 0 && ev.Pos.Compare(j.end) <= 0 {
				j.handed[ev.ID] = true
			}
			if e.beyond(s, j, ev.Pos) {
				j.back, j.handed = false, nil
				break
			}
		}
	}
}

// beyond says whether an event at pos shows the backfill's replay
// complete.
func (e *Engine) beyond(s *streamState, j *joinState, pos impl.Position) bool {
	if s.kind == TimestampStream {
		return pos.Major > j.end.Major+e.lookbackMs()
	}
	return pos.Compare(j.end) > 0
}

// advanceJoinsFirst runs advanceJoins before a hand-off of s when an
// entry from an earlier step has not read its R yet: one owed nothing past
// its start is then done before the hand-off's store writes, which a crash
// could cut off from the advanceJoins after it (seed 133665: the entry came
// 130 s before the stream's first event, which crashed in its hand-off).
func (e *Engine) advanceJoinsFirst(s *streamState) {
	for _, j := range s.joins {
		if !j.back && !j.hasR && j.made != e.stepNo {
			e.advanceJoins(s)
			return
		}
	}
}

// advanceJoins moves the covered entries of s (of every stream if s is
// nil) towards done: it retries failed need writes, reads R, and writes
// the done markers whose R the node's hand-offs reached, in one call.
func (e *Engine) advanceJoins(only *streamState) {
	var cs []impl.Cursor
	var owners []*streamState
	for _, id := range e.strIDs {
		s := e.streams[id]
		if (only != nil && s != only) || len(s.joins) == 0 {
			continue
		}
		for _, j := range s.joins {
			if j.needDirty && !e.writeNeed(s, j) {
				return
			}
			if j.back {
				continue
			}
			if !j.hasR {
				if j.made == e.stepNo {
					continue // the other nodes up at the join may not have written their need yet
				}
				need, okN, err := e.store.GetCursor(e.ctx, needKey(s.id, j.key))
				if err != nil {
					e.retryLater("get-cursor", err)
					return
				}
				cur, okC, err := e.store.GetCursor(e.ctx, impl.CursorKey{Stream: s.id})
				if err != nil {
					e.retryLater("get-cursor", err)
					return
				}
				j.hasR = true
				if okN {
					j.r, j.setR = need.Pos, true
				}
				if okC && (!j.setR || cur.Pos.Compare(j.r) > 0) {
					j.r, j.setR = cur.Pos, true
				}
			}
			// Hand-offs must reach R only when something is owed past the
			// start: an entry that came before any event (R at its start,
			// the anchor) would otherwise stay pending until the stream's
			// first hand-off, and a crash inside it leaves the next boot
			// backfilling what it handed the bot (seeds 133665, 189337,
			// idempotent-replay).
			if j.setR && j.r.Compare(j.from) > 0 && (!s.hasHigh || s.high.Compare(j.r) < 0) {
				continue
			}
			r := j.from // nothing owed past the start: any need lies beyond it
			if j.setR {
				r = j.r
			}
			cs = append(cs, impl.Cursor{Key: doneKey(s.id, j.key), Pos: r, UpdatedAt: e.now})
			owners = append(owners, s)
		}
	}
	if len(cs) == 0 {
		return
	}
	written, err := e.store.AdvanceCursors(e.ctx, cs)
	if err != nil {
		e.retryLater("advance-cursors", err)
		return
	}
	e.countMarkers(written)
	for i, c := range cs {
		s := owners[i]
		for k, j := range s.joins {
			if doneKey(s.id, j.key) == c.Key {
				s.joins = append(s.joins[:k], s.joins[k+1:]...)
				break
			}
		}
		if len(s.joins) == 0 {
			s.joins = nil
		}
	}
}

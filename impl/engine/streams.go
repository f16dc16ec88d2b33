package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/deliverysim/deliverysim/impl"
)

type streamState struct {
	id        string
	kind      StreamKind
	kindKnown bool

	bots      []string       // sorted, every bot ever named for the stream
	timelines [][]Membership // timelines[j]: bots[j]'s, in registry order
	hasBots   bool           // some bot was ever made a member
	entries   []entryRef     // the stream's registry entries, in registry order
	joins     []*joinState   // member entries not yet known done (joins.go)

	// arrivedMax: the furthest event any batch brought in this incarnation.
	arrivedMax impl.Position
	hasArrived bool

	subscribed bool
	// subFrom: where the newest non-fresh subscription resumes (log
	// streams: From; timestamp streams: the position Since was made from).
	subFrom    impl.Position
	hasSubFrom bool
	// repFrom: where the current subscription resumes; repGuard: the
	// furthest event received before it (joins.go, replayProof).
	repFrom     impl.Position
	hasRep      bool
	repGuard    impl.Position
	hasRepGuard bool

	// high is the greatest position handed off durably (or, on boot, the
	// stored cursor). Log streams drop anything at or below it; timestamp
	// streams drop ids in seen instead, because producer skew delivers
	// events below it late.
	high    impl.Position
	hasHigh bool
	seen    map[string]int64 // timestamp streams: id -> created_at ms

	durable    impl.Cursor // what the store is known to hold
	hasDurable bool
	target     impl.Cursor // the newest cursor we want stored
	hasTarget  bool
	// cursorDirty: target's write failed (sync) or was lost (async) and
	// must be retried.
	cursorDirty bool
	// cursorDeferred: target waits in Engine.deferred for its write.
	cursorDeferred bool

	// rowsUpTo: the furthest position of any queue row, live or dead, the
	// store held for this stream when resumeQueue listed it at boot. An
	// earlier incarnation may have written a row for an event at or before
	// it (a direct send's failure, a dead letter), so a replay of such an
	// event is enqueued, the row kept as it is, and never sent direct: a
	// direct send is a fresh attempt 1 that no row counts, and a dead
	// letter takes no new attempts across restarts (PROTOCOL.md, Attempts
	// and dead letters; chaos --plant no-backoff --handoff direct --seed
	// 13 sent a doomed event a ninth time after its dead letter).
	rowsUpTo impl.Position
	hasRows  bool

	// pending holds events whose enqueue failed, sorted; they are retried
	// before anything newer so the cursor never passes them.
	pending       []Event
	pendingCookie []byte

	// holds are hand-offs (HandOffDirect) whose direct sends are not all
	// answered yet, in hand-off order; holds[i] has number holdBase+i. The
	// cursor moves to a hold's upTo only when it and every older hold are
	// settled. Once one is open every hand-off adds a hold, even with no
	// direct sends of its own, so that its events wait behind the older.
	holds    []hold
	holdBase uint64
	freed    bool // in Engine.holdsFreed
}

// entryRef is a registry entry and its index in the registry.
type entryRef struct {
	idx int
	m   Membership
}

type hold struct {
	upTo   impl.Position // s.high after the hand-off
	cookie []byte
	open   int // direct sends not yet answered or written to the queue
}

func (e *Engine) streamFor(id string) *streamState {
	s := e.streams[id]
	if s == nil {
		s = &streamState{id: id, holdBase: 1} // hold number 0 means none
		e.streams[id] = s
		e.strIDs = insertSorted(e.strIDs, id)
	}
	return s
}

func (e *Engine) addMembership(m Membership) (*streamState, int) {
	idx := e.membN
	e.membN++
	s := e.streamFor(m.Stream)
	s.entries = append(s.entries, entryRef{idx: idx, m: m})
	if !s.kindKnown {
		s.kind, s.kindKnown = m.Kind, true
	}
	j, found := slices.BinarySearch(s.bots, m.Bot)
	if !found {
		s.bots = slices.Insert(s.bots, j, m.Bot)
		s.timelines = slices.Insert(s.timelines, j, nil)
	}
	s.timelines[j] = append(s.timelines[j], m)
	if m.Member {
		s.hasBots = true
	}
	e.botFor(m.Bot)
	return s, idx
}

// memberAt applies a bot's membership timeline to pos: each entry decides
// for positions strictly after its From, later entries overriding earlier.
func memberAt(tl []Membership, pos impl.Position) bool {
	member := false
	for i := range tl {
		if pos.Compare(tl[i].From) > 0 {
			member = tl[i].Member
		}
	}
	return member
}

// earliestFrom is the first position any bot's membership starts after.
func (s *streamState) earliestFrom() (impl.Position, bool) {
	var best impl.Position
	found := false
	for _, tl := range s.timelines {
		for _, m := range tl {
			if m.Member && (!found || m.From.Compare(best) < 0) {
				best, found = m.From, true
			}
		}
	}
	return best, found
}

// boot loads the stored cursors and subscribes to every tracked stream:
// those with a stored cursor or with bots.
func (e *Engine) boot() {
	cs, err := e.store.ListCursors(e.ctx)
	e.startPending = err != nil
	if err != nil {
		e.retryLater("list-cursors", err)
		return
	}
	markers := map[impl.CursorKey]impl.Position{}
	for _, c := range cs {
		if IsMarker(c.Key) {
			markers[c.Key] = c.Pos
			continue
		}
		if c.Key.Subscriber != "" {
			continue
		}
		s := e.streamFor(c.Key.Stream)
		s.durable, s.hasDurable = c, true
		// What the store holds is also what it need not be told again: a
		// timestamp stream's replayed lookback ends at the cursor, and
		// writing it back changes nothing (cursor-monotonic judges a
		// write at or behind what the store said it holds).
		if !s.hasTarget || c.Pos.Compare(s.target.Pos) > 0 {
			s.target, s.hasTarget = c, true
		}
		if !s.hasHigh || c.Pos.Compare(s.high) > 0 {
			s.high, s.hasHigh = c.Pos, true
		}
	}
	for _, id := range e.strIDs {
		s := e.streams[id]
		e.loadJoins(s, markers)
		if !s.subscribed && (s.hasDurable || s.hasBots) {
			e.subscribe(s, true)
			if !e.cfg.Bugs.FreshSyncOnBoot {
				e.rewind(s) // after the resume from the cursor: pending backfills
			}
		}
	}
	e.advanceJoins(nil)
}

func (e *Engine) lookbackMs() int64 { return e.cfg.TimestampLookback.Milliseconds() }

func (e *Engine) subscribe(s *streamState, boot bool) {
	s.subscribed = true
	sub := Subscribe{Stream: s.id, Kind: s.kind}
	if boot && e.cfg.Bugs.FreshSyncOnBoot {
		sub.Fresh = true
		e.out.Subscribes = append(e.out.Subscribes, sub)
		return
	}
	from := s.durable.Pos
	if !s.hasDurable {
		from, _ = s.earliestFrom()
	}
	s.subFrom, s.hasSubFrom = from, true
	s.replayed(from)
	if s.kind == TimestampStream {
		if e.cfg.Bugs.TimestampOnlyCursor {
			sub.Since = from.Major + 1
		} else {
			sub.Since = from.Major - e.lookbackMs()
		}
	} else {
		sub.From = from
		if s.hasDurable {
			sub.Token = s.durable.Token
		}
	}
	e.out.Subscribes = append(e.out.Subscribes, sub)
}

func (e *Engine) onMembership(m Membership) {
	s, idx := e.addMembership(m)
	if !m.Member && e.cfg.Bugs.PurgeQueueOnLeave {
		e.purgeLeaver(m)
	}
	if !m.Member || e.startPending {
		return // a boot still to come subscribes from the registry
	}
	if !s.hasDurable && !s.hasTarget {
		// Anchor the stream now, so that events produced during a later
		// downtime are replayed instead of skipped. The anchor is the
		// earliest start of ANY membership, not this one's: earlier members
		// may be owed events that are still on their way from the upstream,
		// and a cursor past them would be a lie (found by the simulator,
		// seed 195: cursor-low-watermark).
		from, _ := s.earliestFrom()
		c := impl.Cursor{Key: impl.CursorKey{Stream: s.id}, Pos: from, UpdatedAt: e.now}
		s.target, s.hasTarget = c, true
		e.writeCursorsSync([]*streamState{s})
		if s.subscribed && s.hasSubFrom && from.Compare(s.subFrom) < 0 {
			// A boot without a cursor subscribed from the earliest start
			// it knew; this entry starts before it, and nothing was handed
			// off yet (else a target would be set): resume from the anchor,
			// or the events between are never received (seed 246686:
			// cursor-low-watermark, no-silent-loss).
			e.subscribe(s, false)
		}
	}
	if !s.subscribed {
		e.subscribe(s, false)
	}
	e.joinLive(s, idx, m)
}

func cmpEvent(a, b Event) int { return cmpEventAt(&a, &b) }

// cmpEventAt is cmpEvent without copying the events: a replay compares
// each event of every batch with its neighbour at least twice.
func cmpEventAt(a, b *Event) int {
	if c := a.Pos.Compare(b.Pos); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// sortedEvents says whether evs is already in cmpEvent order, as an
// upstream's batches usually are, so that they need no sort.
func sortedEvents(evs []Event) bool {
	for i := 1; i < len(evs); i++ {
		if cmpEventAt(&evs[i-1], &evs[i]) > 0 {
			return false
		}
	}
	return true
}

func (e *Engine) onBatch(in UpstreamBatch) {
	s := e.streamFor(in.Stream)
	if !s.kindKnown {
		s.kind, s.kindKnown = in.Kind, true
	}
	if len(in.Events) == 0 {
		return
	}
	// An upstream's batch is usually sorted and all new: then the engine
	// reads it where it lies, and copies it (to sort it, or to drop
	// events from it) only when it must; the caller's slice is never
	// written. A replay's profile had the copy at a fortieth of the
	// direct hand-off's time.
	evs := in.Events
	copied := false
	if !sortedEvents(evs) {
		evs = append(e.evBuf[:0], in.Events...)
		slices.SortFunc(evs, cmpEvent)
		copied = true
	}
	if e.cfg.Bugs.UnguardedCursorWrites && s.hasBots {
		// Seed 000's fire-and-forget write of the batch's cookie, issued
		// before the events are handed off and with no monotonic guard.
		e.nextWrite++
		c := impl.Cursor{Key: impl.CursorKey{Stream: s.id}, Pos: evs[len(evs)-1].Pos, Token: in.Cookie, UpdatedAt: e.now}
		e.writes[e.nextWrite] = c
		e.out.CursorWrites = append(e.out.CursorWrites, CursorWrite{WriteID: e.nextWrite, Cursor: c, Blind: true})
	}
	baseMajor := s.high.Major
	if last := evs[len(evs)-1].Pos; !s.hasArrived || last.Compare(s.arrivedMax) > 0 {
		s.arrivedMax, s.hasArrived = last, true
	}
	// kept aliases evs while no event was dropped; the first drop moves
	// it to e.evBuf (unless evs is that buffer already).
	kept := evs[:0]
	aliased := true
	for i := range evs {
		ev := &evs[i]
		drop := i > 0 && cmpEventAt(&evs[i-1], ev) == 0 // duplicated within the batch
		if !drop && e.handedOff(s, ev, baseMajor) && !s.backWants("", ev) {
			drop = true
		}
		switch {
		case drop && aliased:
			aliased = false
			if !copied {
				kept = append(e.evBuf[:0], kept...)
			}
		case drop:
		case aliased:
			kept = evs[:i+1]
		default:
			kept = append(kept, *ev)
		}
	}
	if copied || !aliased {
		e.evBuf = kept[:0]
	}
	if len(kept) == 0 && len(s.pending) == 0 {
		return
	}
	e.processEvents(s, kept, in.Cookie)
}

// handedOff says whether ev was already handed off by this process (or, for
// log streams, lies at or before the resume cursor).
func (e *Engine) handedOff(s *streamState, ev *Event, baseMajor int64) bool {
	if s.kind == TimestampStream {
		if e.cfg.Bugs.TimestampOnlyCursor {
			return s.hasHigh && ev.Pos.Major <= baseMajor
		}
		_, seen := s.seen[ev.ID]
		return seen
	}
	return s.hasHigh && ev.Pos.Compare(s.high) <= 0
}

// processEvents hands events off (enqueue for every owed bot, one store
// call), then advances the cursor over them and sends to bots with keys.
// If the enqueue fails the events wait in s.pending for the store-retry
// timer, and the cursor stays behind them.
func (e *Engine) processEvents(s *streamState, evs []Event, cookie []byte) {
	redo := false
	if len(s.pending) > 0 {
		redo = true
		merged := append(s.pending, evs...)
		slices.SortFunc(merged, cmpEvent)
		evs = slices.CompactFunc(merged, func(a, b Event) bool { return cmpEvent(a, b) == 0 })
	}
	e.advanceJoinsFirst(s)
	if !e.handOff(s, evs, cookie, redo) {
		if len(s.pending) == 0 || &evs[0] != &s.pending[0] {
			s.pending = slices.Clone(evs)
		} else {
			s.pending = evs
		}
		s.pendingCookie = cookie
		e.armRetry()
		return
	}
	s.pending, s.pendingCookie = nil, nil
	if len(s.joins) > 0 && !e.crashed {
		e.joinsHanded(s, evs)
		e.advanceJoins(s)
	}
}

// directSend is one send of a hand-off with no row: event ev of the batch
// to bot.
type directSend struct {
	ev  *Event
	bot *botState
}

// redo says an earlier hand-off of some of evs failed: its enqueue may
// have committed, and a claim may since have sent those rows and recorded
// their attempts. Such a batch is only enqueued (an existing row is kept
// as it is) and left to claims: a direct send would be a send the row's
// attempt count never learns of (seed 1076: six sends of a message whose
// limit was five).
func (e *Engine) handOff(s *streamState, evs []Event, cookie []byte, redo bool) bool {
	if cap(e.gotBuf) < len(s.bots) {
		e.gotBuf = make([]bool, len(s.bots))
	}
	// got[j]: bot j was enqueued something unleased, which a claim must
	// pick up.
	got := e.gotBuf[:len(s.bots)]
	clear(got)
	var budget []int
	if !redo {
		budget = e.directBudgets(s)
	}
	until := e.now.Add(e.cfg.Lease)
	msgs := e.msgBuf[:0]
	// direct: the sends with no row (HandOffDirect); msgs then holds only
	// the messages the queue must take. Each bot's state is looked up once
	// per batch (botAt) rather than once per send.
	direct := e.dirBuf[:0]
	if cap(e.botAtBuf) < len(s.bots) {
		e.botAtBuf = make([]*botState, len(s.bots))
	}
	botAt := e.botAtBuf[:len(s.bots)]
	clear(botAt)
	baseMajor := s.high.Major
	for i := range evs {
		ev := &evs[i]
		// replayed: handed off before, here only for a backfill's bot.
		// queued: it is, or lies in a running backfill's range (a
		// timestamp replay brings back ids the engine forgot, which may
		// have rows): never sent direct.
		replayed := len(s.joins) > 0 && e.handedOff(s, ev, baseMajor)
		queued := replayed || (len(s.joins) > 0 && s.backWants("", ev))
		for j, bot := range s.bots {
			if !memberAt(s.timelines[j], ev.Pos) {
				continue
			}
			if replayed && !s.backWants(bot, ev) {
				continue
			}
			lease := false
			if !queued && budget != nil && budget[j] > 0 && !(e.direct && s.mayHaveRow(ev)) {
				budget[j]--
				if e.direct {
					if botAt[j] == nil {
						botAt[j] = e.bots[bot]
					}
					direct = append(direct, directSend{ev: ev, bot: botAt[j]})
					continue
				}
				lease = true
			} else {
				got[j] = true
			}
			m := impl.Message{
				Subscriber: bot, EventID: ev.ID, Stream: s.id, Pos: ev.Pos,
				Payload: ev.Payload, CreatedAt: e.now,
			}
			if lease {
				m.LeaseOwner, m.LeaseUntil = e.cfg.Node, until
			}
			msgs = append(msgs, m)
		}
	}
	defer func() {
		clear(msgs) // drop payload references held by the reused buffers
		e.msgBuf = msgs[:0]
		clear(direct)
		e.dirBuf = direct[:0]
		clear(botAt)
	}()
	inserted := 0
	var ins []bool
	if len(msgs) > 0 {
		var err error
		if budget != nil && !e.direct {
			ins, err = e.enqueueLeased(msgs)
			if err == nil && len(ins) != len(msgs) {
				err = fmt.Errorf("store returned %d results for %d messages", len(ins), len(msgs))
			}
			for _, ok := range ins {
				if ok {
					inserted++
				}
			}
		} else {
			inserted, err = e.store.Enqueue(e.ctx, msgs)
		}
		if err != nil {
			e.storeErr("enqueue", err)
			e.wakeAtLapse(msgs)
			return false
		}
		e.cnt.Enqueued += inserted
	}
	last := evs[len(evs)-1].Pos
	for i := range evs {
		ev := &evs[i]
		if s.kind == TimestampStream {
			if s.seen == nil {
				s.seen = map[string]int64{}
			}
			s.seen[ev.ID] = ev.Pos.Major
		}
		if !s.hasHigh || ev.Pos.Compare(s.high) > 0 {
			s.high, s.hasHigh = ev.Pos, true
		}
	}
	if len(msgs) > 0 {
		e.note(Note{Kind: "enqueued", Stream: s.id, Pos: last, Count: inserted})
	}
	var holdNo uint64
	switch {
	case !s.hasBots || e.cfg.Bugs.UnguardedCursorWrites:
	case e.direct && !e.cfg.Bugs.CursorBeforeDirectAnswer && (len(direct) > 0 || len(s.holds) > 0):
		holdNo = s.holdBase + uint64(len(s.holds))
		s.holds = append(s.holds, hold{upTo: s.high, cookie: cookie, open: len(direct)})
	default:
		e.advanceCursor(s, cookie)
		if e.crashed {
			return true
		}
	}
	if len(direct) > 0 {
		e.out.Sends = slices.Grow(e.out.Sends, len(direct))
		for i := range direct {
			e.sendDirect(direct[i].bot, s, direct[i].ev, holdNo)
		}
	}
	if ins != nil {
		e.sendLeased(s, msgs, ins, got)
		if e.crashed {
			return true
		}
	}
	for j, bot := range s.bots {
		if got[j] {
			b := e.bots[bot]
			b.backlog = true
			e.pump(b)
			if e.crashed {
				return true
			}
		}
	}
	return true
}

// mayHaveRow says whether the store may hold a queue row of ev that an
// earlier incarnation wrote (rowsUpTo).
func (s *streamState) mayHaveRow(ev *Event) bool {
	return s.hasRows && ev.Pos.Compare(s.rowsUpTo) <= 0
}

// directBudgets says, per bot of s, how many of this hand-off's messages
// may be enqueued already leased to this node and sent at once: as many as
// the bot has free request slots, if it has its key and nothing queued that
// is due before them (otherwise a claim takes the queue in order). It
// returns nil when the engine has no leaser or nothing may.
func (e *Engine) directBudgets(s *streamState) []int {
	if e.leaser == nil {
		return nil
	}
	budget := e.budgetBuf[:0]
	some := false
	for _, id := range s.bots {
		n := 0
		if b := e.bots[id]; b.hasKey && !b.backlog {
			n = max(e.limit(b)-b.inflight, 0)
		}
		some = some || n > 0
		budget = append(budget, n)
	}
	e.budgetBuf = budget
	if !some {
		return nil
	}
	return budget
}

// wakeAtLapse wakes the bots of the leased messages of a failed enqueue
// (unleased ones need nothing) when the leases it asked for lapse. The failure may have been a lost commit acknowledgement:
// the rows may exist, leased to this node and sent by no one, and the retry
// of the hand-off may not see them as ours (with no free request slot it
// enqueues unleased, finds the rows and inserts nothing), so no claim is
// due before housekeeping (seed 94103, no-head-of-line-blocking).
func (e *Engine) wakeAtLapse(msgs []impl.Message) {
	for i := range msgs {
		if m := &msgs[i]; m.LeaseOwner != "" {
			e.addDue(e.bots[m.Subscriber], m.LeaseUntil)
		}
	}
}

// sendLeased sends the messages that EnqueueLeased inserted leased to this
// node, exactly as pump sends claimed ones. A leased message that was not
// inserted already existed (replayed after a crash, say): its bot gets a
// claim instead, which finds it if it is due.
func (e *Engine) sendLeased(s *streamState, msgs []impl.Message, ins []bool, got []bool) {
	sends := 0
	for i := range msgs {
		if msgs[i].LeaseOwner != "" && ins[i] {
			sends++
		}
	}
	if sends > 0 && e.crashAt(CrashAfterStoreWriteBeforeSend) {
		return
	}
	e.bugDeleteBeforeSend(msgs, ins)
	e.out.Sends = slices.Grow(e.out.Sends, sends)
	checkOutstanding := len(e.byKey) > 0
	for i := range msgs {
		m := &msgs[i]
		if m.LeaseOwner == "" {
			continue
		}
		if !ins[i] {
			if j, ok := slices.BinarySearch(s.bots, m.Subscriber); ok {
				got[j] = true
			}
			// The row may be our own, from an attempt of this very
			// enqueue whose commit was reported ambiguous: leased to us
			// and sent by no one. A claim finds it only once that lease
			// lapses, so wake the bot then rather than at the next
			// maintenance sweep (found by the simulator: seed 199,
			// no-head-of-line-blocking).
			e.addDue(e.bots[m.Subscriber], m.LeaseUntil)
			continue
		}
		b := e.bots[m.Subscriber]
		if checkOutstanding {
			// A request for an earlier copy of this message (deleted
			// since, by retention) may still be open.
			e.supersede(b, m.Key())
		}
		e.sendMessage(b, m)
	}
}

// advanceCursor moves the stream's cursor to high, which at this point
// covers only events already handed off: the cursor is a low watermark.
func (e *Engine) advanceCursor(s *streamState, cookie []byte) {
	if !e.setTarget(s, s.high, cookie) {
		return
	}
	if e.cfg.CursorMode == CursorAsync {
		e.emitCursorWrite(s)
		return
	}
	e.writeCursorsSync([]*streamState{s})
}

// setTarget makes pos the cursor to store next, if it is ahead of the
// current target (and the engine survives the crash point before it).
func (e *Engine) setTarget(s *streamState, pos impl.Position, cookie []byte) bool {
	if s.hasTarget && pos.Compare(s.target.Pos) <= 0 {
		return false
	}
	if e.crashAt(CrashAfterProcessBeforeCursor) {
		return false
	}
	s.target = impl.Cursor{Key: impl.CursorKey{Stream: s.id}, Pos: pos, Token: cookie, UpdatedAt: e.now}
	s.hasTarget = true
	return true
}

// releaseHold settles one direct send of hold n of stream: it was answered
// with a 2xx, or its row is written. n = 0 is no hold.
func (e *Engine) releaseHold(stream string, n uint64) {
	if n != 0 {
		e.releaseHoldOf(e.streams[stream], n)
	}
}

// releaseHoldOf is releaseHold for a caller that holds the stream.
func (e *Engine) releaseHoldOf(s *streamState, n uint64) {
	if n == 0 || s == nil || n < s.holdBase || n-s.holdBase >= uint64(len(s.holds)) {
		return // not held, or from before a rewind's reset (cannot happen today)
	}
	h := &s.holds[n-s.holdBase]
	h.open--
	if h.open == 0 && n == s.holdBase {
		e.freeHold(s)
	}
}

func (e *Engine) freeHold(s *streamState) {
	if !s.freed {
		s.freed = true
		e.holdsFreed = append(e.holdsFreed, s)
	}
}

// moveHeldCursors runs at the end of a Step: each stream whose oldest hold
// was settled drops its settled holds from the front and moves its cursor
// to the newest of them, all streams in one store call.
func (e *Engine) moveHeldCursors() {
	freed := e.holdsFreed
	e.holdsFreed = freed[:0]
	var moved []*streamState
	for _, s := range freed {
		s.freed = false
		k := 0
		for k < len(s.holds) && s.holds[k].open <= 0 {
			k++
		}
		if k == 0 {
			continue
		}
		// The furthest of them: after a rewind a newer hold can end
		// before an older one.
		last := s.holds[0]
		for _, h := range s.holds[1:k] {
			if h.upTo.Compare(last.upTo) > 0 {
				last = h
			}
		}
		clear(s.holds[:k])
		s.holds = s.holds[k:]
		s.holdBase += uint64(k)
		if len(s.holds) == 0 {
			s.holds = nil // let the array go; the next hold starts a fresh one
		}
		if !e.setTarget(s, last.upTo, last.cookie) {
			if e.crashed {
				return
			}
			continue
		}
		moved = append(moved, s)
	}
	if len(moved) == 0 {
		return
	}
	if e.cfg.CursorMode == CursorAsync {
		for _, s := range moved {
			e.emitCursorWrite(s)
		}
		return
	}
	e.writeCursorsSync(moved)
}

func (e *Engine) emitCursorWrite(s *streamState) {
	if s.needPending() {
		s.cursorDirty = true
		e.armRetry()
		return
	}
	e.nextWrite++
	e.writes[e.nextWrite] = s.target
	s.cursorDirty = false
	e.out.CursorWrites = append(e.out.CursorWrites, CursorWrite{WriteID: e.nextWrite, Cursor: s.target})
}

func (e *Engine) writeCursorsSync(ss []*streamState) {
	if slices.ContainsFunc(ss, (*streamState).needPending) {
		// A need marker first (joins.go): these cursors wait for the retry.
		ss = slices.DeleteFunc(slices.Clone(ss), func(s *streamState) bool {
			if s.needPending() {
				s.cursorDirty = true
				e.armRetry()
				return true
			}
			return false
		})
		if len(ss) == 0 {
			return
		}
	}
	if e.writer != nil {
		e.deferCursors(ss)
		return
	}
	cs := make([]impl.Cursor, len(ss))
	for i, s := range ss {
		cs[i] = s.target
	}
	written, err := e.store.AdvanceCursors(e.ctx, cs)
	if err != nil {
		for _, s := range ss {
			s.cursorDirty = true
		}
		e.retryLater("advance-cursors", err)
		return
	}
	for i, s := range ss {
		s.cursorDirty = false
		if i < len(written) && written[i] {
			e.cursorStored(s, cs[i])
		}
	}
}

func (e *Engine) cursorStored(s *streamState, c impl.Cursor) {
	e.cnt.CursorWrites++
	if !s.hasDurable || c.Pos.Compare(s.durable.Pos) > 0 {
		s.durable, s.hasDurable = c, true
	}
	e.note(Note{Kind: "cursor", Stream: s.id, Pos: c.Pos})
}

func (e *Engine) retryCursors(ss []*streamState) {
	if e.cfg.CursorMode == CursorAsync {
		for _, s := range ss {
			e.emitCursorWrite(s)
		}
		return
	}
	e.writeCursorsSync(ss)
}

func (e *Engine) onCursorWriteDone(d CursorWriteDone) {
	c, ok := e.writes[d.WriteID]
	if !ok {
		return
	}
	delete(e.writes, d.WriteID)
	s := e.streamFor(c.Key.Stream)
	if d.Err != nil {
		e.storeErr("cursor-write", d.Err)
		if !e.cfg.Bugs.UnguardedCursorWrites && s.hasTarget && c.Pos.Compare(s.target.Pos) == 0 {
			s.cursorDirty = true
			e.armRetry()
		}
		return
	}
	e.cursorStored(s, c)
}

// pruneSeen forgets timestamp-stream ids far behind the cursor: a replay
// after restart reaches back only TimestampLookback, so older ids cannot
// come back except as rare duplicates, which the receiver absorbs.
func (e *Engine) pruneSeen() {
	lb := 2 * e.lookbackMs()
	for _, id := range e.strIDs {
		s := e.streams[id]
		if len(s.seen) == 0 {
			continue
		}
		cut := s.high.Major - lb
		for _, j := range s.joins {
			// A running backfill's replay reaches back to its start less
			// the lookback: its ids must stay known until it ends, or a
			// duplicate of its batches is handed off again (seed 2120,
			// idempotent-replay).
			if j.back && j.from.Major-e.lookbackMs() < cut {
				cut = j.from.Major - e.lookbackMs()
			}
		}
		for ev, major := range s.seen {
			if major < cut {
				delete(s.seen, ev)
			}
		}
	}
}

// purgeLeaver is the PurgeQueueOnLeave bug: when a bot leaves a stream,
// whatever is still queued for it from that stream is deleted, although it
// was a member when those events were produced and is owed them.
func (e *Engine) purgeLeaver(m Membership) {
	msgs, err := e.store.ListMessages(e.ctx, m.Bot)
	if err != nil {
		e.storeErr("list-messages", err)
		return
	}
	var keys []impl.MessageKey
	for _, msg := range msgs {
		if msg.Stream == m.Stream {
			keys = append(keys, msg.Key())
		}
	}
	if len(keys) == 0 {
		return
	}
	if _, err := e.store.Ack(e.ctx, keys); err != nil {
		e.storeErr("ack", err)
		return
	}
	for _, k := range keys {
		e.note(Note{Kind: "dropped", Bot: k.Subscriber, EventID: k.EventID, Stream: m.Stream, Count: 1, Detail: "left the stream"})
	}
}

package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model"
)

// Lists longer than any page. The engine and the stores compare a list's
// length against a few sizes: a claim asks for as many rows as the bot
// has free request slots (and a full claim means more may wait behind
// it), the open-breaker drop claims 1000 rows at a time and retention_max
// defaults to 1000, and Postgres switches to COPY (enqueue) and to a
// guarded range delete (ack) from 32 rows of one call. A drawn world's
// bot never held more than a few dozen rows, so a store or engine that
// reads one page of 1000 and forgets the rest was never seen to.

// Probe names of the list boundaries (coverage catalogue).
const (
	CovClaimPageBelow = "boundary/claim-page/below"
	CovClaimPageAt    = "boundary/claim-page/at"
	CovClaimPageAbove = "boundary/claim-page/above"
	CovList1000Below  = "boundary/list-1000/below"
	CovList1000At     = "boundary/list-1000/at"
	CovList1000Above  = "boundary/list-1000/above"
	CovList1000Listed = "boundary/list-1000/listed-whole"
	CovBatch32Below   = "boundary/store-batch-32/enqueue/below"
	CovBatch32At      = "boundary/store-batch-32/enqueue/at"
	CovBatch32Above   = "boundary/store-batch-32/enqueue/above"
)

// LongPage is the longest page the engine reads (the open-breaker drop's
// claim) and retention_max's default: a long world's bot holds about that
// many rows at once.
const LongPage = 1000

// LongBot is the bot of a long world's list: until its queue is shorter
// than the longest page, every full claim of it reads the queue back.
const LongBot = "bot-long"

// StoreBatchRows is the call size from which pgstore changes plan:
// defaultCopyMinRows (enqueue by COPY) and defaultRangeMinKeys (the
// guarded range ack); TestStoreBatchRowsIsPgstores holds them equal.
const StoreBatchRows = 32

var listBoundaryProbes = []Probe{
	{CovClaimPageBelow, "a claim for 2 or more rows found one row less than it asked for due (a short page: the bot's backlog is clear)"},
	{CovClaimPageAt, "a claim found exactly as many due rows as it asked for (a full page with nothing due behind it)"},
	{CovClaimPageAbove, "a claim found exactly one due row more than it asked for (a full page, one row left behind for the next claim)"},
	{CovList1000Below, "a claim met its bot holding 999 rows (one less than the longest page)"},
	{CovList1000At, "a claim met its bot holding exactly 1000 rows (the longest page, retention_max's default)"},
	{CovList1000Above, "a claim met its bot holding 1001 rows (one row beyond the longest page)"},
	{CovList1000Listed, "a ListMessages of every bot (a node's boot) answered with one bot holding more than 1000 rows"},
	{CovBatch32Below, "one store call enqueued 31 rows (pgstore's plain INSERT, one below its COPY batch)"},
	{CovBatch32At, "one store call enqueued exactly 32 rows (pgstore's first COPY batch)"},
	{CovBatch32Above, "one store call enqueued 33 rows"},
}

func listBoundaries() []Boundary {
	return []Boundary{
		{"claim page (Claim Limit = max_in_flight_per_bot less the requests in flight)",
			"impl/engine queue.go pump: backlog = len(claimed) == free; memstore/pgstore Claim: stop at Limit",
			[]string{CovClaimPageBelow, CovClaimPageAt, CovClaimPageAbove}, ""},
		{"the longest page, 1000 rows (retention_max's default; the open-breaker drop's Claim Limit 1000)",
			"impl/engine queue.go dropWhileOpen Limit 1000; maintain TrimPerSubscriber(RetentionMax); ListMessages and Claim over a long queue",
			[]string{CovList1000Below, CovList1000At, CovList1000Above, CovList1000Listed}, ""},
		{"store batch of 32 rows (pgstore defaultCopyMinRows, defaultRangeMinKeys, probeMinKeys)",
			"impl/pgstore copy.go: COPY from 32 rows; ack.go: range delete from 32 keys of one subscriber",
			[]string{CovBatch32Below, CovBatch32At, CovBatch32Above},
			"acks of 32 keys of one bot need 32 requests in flight to it; max_in_flight_per_bot is 8 in every world: not probed"},
	}
}

// drawLong gives one world in sixty a bot with a list longer than any
// page, from its own stream (every other draw is unchanged): a log stream
// whose LongPage-1 to LongPage+300 events are all produced in one instant
// and come in one upstream batch, queued (not handed off directly) for
// one bot of its own, so its first claim meets every row. Three long
// worlds in four hold 999, 1000 or 1001 rows exactly. retention_max
// keeps its default, so a cap cleanup in the drain meets the longest
// page too. The bot answers within milliseconds, so the list drains in
// seconds of simulated time, and the list is the world's only traffic:
// it costs what a few small ones do.
func drawLong(seed uint64, w *Workload) {
	r := actorRand(seed, "workload/long")
	if r.IntN(60) != 0 {
		return
	}
	n := LongPage - 1 + r.IntN(3)
	if r.IntN(4) == 0 {
		n = LongPage + 2 + r.IntN(300)
	}
	at := between(r, time.Minute, w.Produce/2).Truncate(time.Millisecond)
	st := StreamSpec{Name: "stream-long", Kind: engine.LogStream, SealEvery: between(r, 30*time.Second, 2*time.Minute),
		LatencyMin: 10 * time.Millisecond, LatencyMax: 10 * time.Millisecond, ExplicitEvents: true, Explicit: make([]EventSpec, n)}
	for i := range st.Explicit {
		st.Explicit[i].At = at
	}
	b := BotSpec{ID: LongBot, Secret: make([]byte, 24), LatencyMin: 2 * time.Millisecond}
	b.LatencyMax = b.LatencyMin + between(r, 0, 50*time.Millisecond)
	for j := range b.Secret {
		b.Secret[j] = byte(r.Uint32())
	}
	// The long list is the world's only traffic and its bot the only
	// one: a base bot that membership churn joined to the stream would
	// be owed the whole list again (seed 389 cost a hundred small
	// worlds), and the base's streams and sources as much again.
	w.Streams = []StreamSpec{st}
	w.Bots = []BotSpec{b}
	w.Members = []MemberSpec{{Stream: st.Name, Bot: b.ID}}
	w.Sources = nil
	w.BatchMax = max(w.BatchMax, n)
	w.HandOff = engine.HandOffQueued
	w.RetentionMax = engine.DefaultConfig().RetentionMax
}

// enqueuedRows: one store call enqueued n rows.
func (b *edges) enqueuedRows(n int) {
	switch n {
	case StoreBatchRows - 1:
		b.hit(CovBatch32Below)
	case StoreBatchRows:
		b.hit(CovBatch32At)
	case StoreBatchRows + 1:
		b.hit(CovBatch32Above)
	}
}

// claimPage classifies a claim of req that returned got rows against the
// page it asked for and the longest page. A full claim reads the bot's
// queue back (what is due, and held, after it); a short one needs no read
// (it found all that was due, and a long list always fills a claim first).
func (b *edges) claimPage(ctx context.Context, st impl.Store, req impl.ClaimRequest, got int) {
	if got < req.Limit {
		if req.Limit >= 2 && got == req.Limit-1 {
			b.hit(CovClaimPageBelow)
		}
		return
	}
	// A full claim is common (every backlog), and reading the queue back
	// costs its length: one in claimPageSample is read, and every one in
	// a world with a long list.
	long := req.Subscriber == LongBot && (b.longHeld == 0 || b.longHeld >= LongPage-1)
	if b.fullClaims++; b.fullClaims%claimPageSample != 0 && !long {
		return
	}
	msgs, err := listSharedOf(ctx, st, req.Subscriber)
	if err != nil {
		return
	}
	due := 0
	for i := range msgs {
		if model.Claimable(msgs[i], req.Now) {
			due++
		}
	}
	switch due {
	case 0:
		b.hit(CovClaimPageAt)
	case 1:
		b.hit(CovClaimPageAbove)
	}
	if req.Subscriber == LongBot {
		b.longHeld = len(msgs)
	}
	switch len(msgs) {
	case LongPage - 1:
		b.hit(CovList1000Below)
	case LongPage:
		b.hit(CovList1000At)
	case LongPage + 1:
		b.hit(CovList1000Above)
	}
}

// claimPageSample: one full claim in this many reads its queue back.
const claimPageSample = 16

// listed: a ListMessages of every subscriber answered msgs (in queue
// order, one subscriber's rows together).
func (b *edges) listed(msgs []impl.Message) {
	run := 0
	for i := range msgs {
		if i > 0 && msgs[i].Subscriber != msgs[i-1].Subscriber {
			run = 0
		}
		if run++; run == LongPage+1 {
			b.hit(CovList1000Listed)
			return
		}
	}
}

// listSharedOf is listShared for one subscriber.
func listSharedOf(ctx context.Context, st impl.Store, subscriber string) ([]impl.Message, error) {
	if subscriber == "" {
		return nil, fmt.Errorf("sim: a claim for every subscriber has no one queue")
	}
	if l, ok := st.(sharedLister); ok {
		return l.ListMessagesShared(ctx, subscriber)
	}
	return st.ListMessages(ctx, subscriber)
}

package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// leasing gives the rig's store the impl.LeasingEnqueuer capability, built
// from memstore's public methods: insert, then lease the new messages with a
// claim. That claim can only pick exactly those messages when nothing older
// of the subscriber is due, which is when the engine goes direct; if it
// picks anything else the shim fails the call loudly instead of guessing.
type leasing struct {
	*flaky
	claims int // Claim calls made by the engine
}

func (l *leasing) Claim(ctx context.Context, req impl.ClaimRequest) ([]impl.Message, error) {
	l.claims++
	return l.flaky.Claim(ctx, req)
}

func (l *leasing) EnqueueLeased(ctx context.Context, msgs []impl.Message) ([]bool, error) {
	if err := l.check("Enqueue"); err != nil {
		return nil, err
	}
	present := map[impl.MessageKey]bool{}
	for _, m := range msgs {
		if _, seen := present[impl.MessageKey{Subscriber: m.Subscriber}]; seen {
			continue
		}
		present[impl.MessageKey{Subscriber: m.Subscriber}] = true
		old, err := l.Store.ListMessages(ctx, m.Subscriber)
		if err != nil {
			return nil, err
		}
		for _, o := range old {
			present[o.Key()] = true
		}
	}
	ins := make([]bool, len(msgs))
	leased := map[string][]impl.Message{}
	for i, m := range msgs {
		if present[m.Key()] {
			continue
		}
		present[m.Key()] = true
		ins[i] = true
		if m.LeaseOwner != "" {
			leased[m.Subscriber] = append(leased[m.Subscriber], m)
		}
	}
	if _, err := l.Store.Enqueue(ctx, msgs); err != nil {
		return nil, err
	}
	subs := make([]string, 0, len(leased))
	for sub := range leased {
		subs = append(subs, sub)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		want := leased[sub]
		got, err := l.Store.Claim(ctx, impl.ClaimRequest{Subscriber: sub, Owner: want[0].LeaseOwner,
			Now: want[0].CreatedAt, Lease: want[0].LeaseUntil.Sub(want[0].CreatedAt), Limit: len(want)})
		if err != nil {
			return nil, err
		}
		var wantIDs, gotIDs []string
		for _, m := range want {
			wantIDs = append(wantIDs, m.EventID)
		}
		for _, m := range got {
			gotIDs = append(gotIDs, m.EventID)
		}
		slices.Sort(wantIDs)
		slices.Sort(gotIDs)
		if !slices.Equal(wantIDs, gotIDs) {
			return nil, fmt.Errorf("test shim: leasing %v of %s claimed %v instead (something older was due)", wantIDs, sub, gotIDs)
		}
	}
	return ins, nil
}

func newDirectRig(t *testing.T, mutate func(*Config)) (*rig, *leasing) {
	r := newRig(t, mutate)
	l := &leasing{flaky: r.st}
	r.store = l
	return r, l
}

func TestDirectSendLeasesAtEnqueueWithoutClaim(t *testing.T) {
	r, l := newDirectRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	ss := r.takeSends()
	assert.Equal(t, []string{"s/1.0", "s/1.1"}, sendIDs(ss))
	assert.Zero(t, l.claims, "the new messages were leased by the enqueue itself")
	for _, m := range r.messages("b") {
		assert.Equal(t, "node-1", m.LeaseOwner, "queued, and leased to this node while in flight")
		assert.Equal(t, t0.Add(30*time.Second), m.LeaseUntil)
	}
	for _, s := range ss {
		assert.Equal(t, 1, s.Attempt)
		assert.Equal(t, webhook.Sign([]byte("secret-b"), s.EventID, s.Timestamp, s.Body), s.Signature)
		r.reply(s, OutcomeOK)
	}
	assert.Empty(t, r.messages("b"), "acked")
	c, _ := r.cursor("s")
	assert.Equal(t, pos(1, 1), c.Pos)
}

func TestDirectSendOnlyUpToFreeSlots(t *testing.T) {
	r, l := newDirectRig(t, func(c *Config) { c.MaxInFlightPerBot = 2 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2)))
	ss := r.takeSends()
	assert.Equal(t, []string{"s/1.0", "s/1.1"}, sendIDs(ss), "two slots: the third waits in the queue")
	claimsAfterBatch := l.claims
	r.reply(ss[0], OutcomeOK)
	assert.Equal(t, []string{"s/1.2"}, sendIDs(r.takeSends()), "a freed slot claims the queued one")
	assert.Greater(t, l.claims, claimsAfterBatch)
}

func TestDirectSendNotForBotWithoutKey(t *testing.T) {
	r, _ := newDirectRig(t, nil)
	oneBot(r, false)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	assert.Empty(t, r.takeSends())
	ms := r.messages("b")
	require.Len(t, ms, 1)
	assert.Empty(t, ms[0].LeaseOwner, "queued for when the key comes")
	r.step(KeyPublished{Bot: "b"})
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeOK)
	// The flush claim came back short: later messages go direct again.
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	assert.Equal(t, []string{"s/2.0"}, sendIDs(r.takeSends()))
	assert.Equal(t, "node-1", r.messages("b")[0].LeaseOwner)
}

func TestDirectSendCrashAfterStoreWriteBeforeSend(t *testing.T) {
	r, _ := newDirectRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.crash[CrashAfterStoreWriteBeforeSend] = true
	require.ErrorIs(t, r.stepErr(batch("s", "c", logEvent("s", 1, 0))), ErrCrashed)
	assert.Empty(t, r.takeSends())
	r.expectLeasedThenResent("s/1.0")
}

func TestDirectSendReplayedMessageIsClaimedNotDuplicated(t *testing.T) {
	r, _ := newDirectRig(t, nil)
	oneBot(r, true)
	r.boot()
	r.crash[CrashAfterProcessBeforeCursor] = true
	require.ErrorIs(t, r.stepErr(batch("s", "c", logEvent("s", 1, 0))), ErrCrashed)

	r.boot()
	r.step(batch("s", "c", logEvent("s", 1, 0), logEvent("s", 1, 1)))
	assert.Equal(t, []string{"s/1.1"}, sendIDs(r.takeSends()), "the replayed event is already queued and leased: not sent again yet")
	r.advance(30 * time.Second)
	ss := r.takeSends()
	assert.Equal(t, []string{"s/1.0", "s/1.1"}, sendIDs(ss), "both claimed again once the earlier lease lapsed")
	for _, s := range ss {
		r.reply(s, OutcomeOK)
	}
	assert.Empty(t, r.messages("b"))
}

func TestDirectSendRetryStillComesDue(t *testing.T) {
	r, l := newDirectRig(t, func(c *Config) { c.JitterFraction = 0 })
	oneBot(r, true)
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0)))
	ss := r.takeSends()
	require.Len(t, ss, 1)
	r.reply(ss[0], OutcomeStatus)
	assert.Empty(t, r.takeSends())
	// A retry that is not due yet holds nothing back, as with a claim: the
	// new message goes out at once (the refill claim after the failure
	// found nothing due), the retry when its backoff ends.
	before := l.claims
	r.step(batch("s", "c2", logEvent("s", 2, 0)))
	assert.Equal(t, []string{"s/2.0"}, sendIDs(r.takeSends()))
	assert.Equal(t, before, l.claims, "sent direct")
	r.advance(time.Second)
	again := r.takeSends()
	require.Len(t, again, 1)
	assert.Equal(t, "s/1.0", again[0].EventID)
	assert.Equal(t, 2, again[0].Attempt)
}

// The direct path is an optimisation: the same inputs give the same
// deliveries, acknowledgements and final store as enqueue-then-claim.
func TestDirectSendSameOutcomeAsClaimPath(t *testing.T) {
	run := func(direct bool) (sent []string, acked []string, left []impl.Message) {
		r := newRig(t, func(c *Config) { c.MaxInFlightPerBot = 3 })
		if direct {
			r.store = &leasing{flaky: r.st}
		}
		r.reg = mixedRegistry()
		r.boot()
		n := 0
		for i := int64(1); i <= 6; i++ {
			r.step(batch("s1", "c", logEvent("s1", i, 0), logEvent("s1", i, 1)))
			r.step(batch("s2", "c", logEvent("s2", i, 0)))
			if i == 3 {
				r.step(KeyPublished{Bot: "b2"})
			}
			for _, s := range r.takeSends() {
				n++
				sent = append(sent, fmt.Sprintf("%s %s #%d", s.Bot, s.EventID, s.Attempt))
				if n%4 == 0 {
					r.reply(s, OutcomeStatus)
				} else {
					r.reply(s, OutcomeOK)
				}
			}
			r.advance(1500 * time.Millisecond)
		}
		for range 30 {
			for _, s := range r.takeSends() {
				sent = append(sent, fmt.Sprintf("%s %s #%d", s.Bot, s.EventID, s.Attempt))
				r.reply(s, OutcomeOK)
			}
			r.advance(5 * time.Second)
		}
		for _, nt := range r.notesOf("acked") {
			acked = append(acked, nt.Bot+" "+nt.EventID)
		}
		slices.Sort(sent)
		slices.Sort(acked)
		left, err := r.mem.ListMessages(context.Background(), "")
		require.NoError(t, err)
		return sent, acked, left
	}
	sentA, ackedA, leftA := run(false)
	sentB, ackedB, leftB := run(true)
	require.NotEmpty(t, ackedA)
	assert.Equal(t, sentA, sentB, "same requests (bot, event, attempt)")
	assert.Equal(t, ackedA, ackedB)
	assert.Equal(t, leftA, leftB)
}

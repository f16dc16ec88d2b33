package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl"
)

// A join that starts behind the durable cursor is backfilled to its bot
// alone, and stays pending across a restart until the replay is complete:
// the reboot resumes from the cursor and rewinds to the join's start again
// (the loss of the old rewind: the cursor stayed ahead, a crash during the
// replay restarted from it, and the backfill was never delivered).
func TestBackfillingJoinSurvivesARestart(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots:        []Bot{{ID: "a", Secret: []byte("a"), HasKey: true}, {ID: "b", Secret: []byte("b"), HasKey: true}},
		Memberships: []Membership{member("s", "a", impl.Position{})},
	}
	r.boot()
	done := func(key string) bool {
		c, ok, err := r.mem.GetCursor(t.Context(), doneKey("s", key))
		require.NoError(t, err)
		need, okN, err := r.mem.GetCursor(t.Context(), needKey("s", key))
		require.NoError(t, err)
		return ok && (!okN || need.Pos.Compare(c.Pos) <= 0)
	}
	assert.True(t, done("a#0"), "an entry with nothing handed off past its start is done at once")
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2)))
	for _, s := range r.takeSends() {
		r.reply(s, OutcomeOK)
	}
	c, _ := r.cursor("s")
	require.Equal(t, pos(1, 2), c.Pos)

	j := member("s", "b", pos(1, 0))
	r.reg.Memberships = append(r.reg.Memberships, j)
	rd := r.step(MembershipChanged{Membership: j})
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, pos(1, 0), rd.Subscribes[0].From, "rewound to the join's start")
	need, ok, err := r.mem.GetCursor(t.Context(), needKey("s", "b#1"))
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, pos(1, 2), need.Pos, "the need marker: what this node handed off without b")
	assert.False(t, done("b#1"))

	// Restart before the replay came.
	rd = r.boot()
	require.Len(t, rd.Subscribes, 2)
	assert.Equal(t, pos(1, 2), rd.Subscribes[0].From, "resumes from the cursor")
	assert.Equal(t, pos(1, 0), rd.Subscribes[1].From, "then rewinds for the pending join")

	r.step(batch("s", "c2", logEvent("s", 1, 1), logEvent("s", 1, 2)))
	sends := r.takeSends()
	assert.ElementsMatch(t, []string{"s/1.1", "s/1.2"}, sendIDs(sends))
	for _, s := range sends {
		assert.Equal(t, "b", s.Bot, "the replay goes to the joining bot alone")
		r.reply(s, OutcomeOK)
	}
	assert.False(t, done("b#1"), "the replay is complete only once an event past it arrives")

	r.step(batch("s", "c3", logEvent("s", 2, 0)))
	assert.ElementsMatch(t, []string{"s/2.0", "s/2.0"}, sendIDs(r.takeSends()))
	assert.True(t, done("b#1"))

	rd = r.boot()
	require.Len(t, rd.Subscribes, 1, "no pending join: no rewind")
}

// A bot that joins before the stream's first event is owed nothing behind
// it: its entry is done before the first hand-off's store writes, so a
// crash inside that hand-off leaves no pending join for the next boot to
// backfill (seed 133665, idempotent-replay: the boot replayed the event to
// the bot that had it queued already).
func TestJoinBeforeTheFirstEventIsDoneBeforeTheFirstHandOff(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots:        []Bot{{ID: "a", Secret: []byte("a"), HasKey: true}, {ID: "b", Secret: []byte("b"), HasKey: true}},
		Memberships: []Membership{member("s", "a", impl.Position{})},
	}
	r.boot()
	j := member("s", "b", impl.Position{})
	r.reg.Memberships = append(r.reg.Memberships, j)
	rd := r.step(MembershipChanged{Membership: j})
	require.Empty(t, rd.Subscribes, "nothing handed off past its start: no backfill")

	r.crash[CrashAfterStoreWriteBeforeSend] = true
	require.ErrorIs(t, r.stepErr(batch("s", "c1", logEvent("s", 1, 0))), ErrCrashed)
	assert.ElementsMatch(t, []string{"s/1.0"}, r.eventIDs("b"), "the crashed hand-off queued the event for b")
	_, ok, err := r.mem.GetCursor(t.Context(), doneKey("s", "b#1"))
	require.NoError(t, err)
	assert.True(t, ok, "b's entry was done before the hand-off")

	rd = r.boot()
	require.Len(t, rd.Subscribes, 1, "no pending join: no rewind")
	assert.Equal(t, pos(1, 0), rd.Subscribes[0].From)
}

// A boot without a stream cursor subscribes from the earliest start it
// knows. An entry that comes later with an earlier start anchors the
// stream there, and the subscription must move back with it: else the
// events between the two starts are never received, and the first batch
// carries the cursor past them (seed 246686: cursor-low-watermark and
// no-silent-loss).
func TestEarlierJoinBeforeAnyCursorResubscribes(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots:        []Bot{{ID: "a", Secret: []byte("a"), HasKey: true}, {ID: "b", Secret: []byte("b"), HasKey: true}},
		Memberships: []Membership{member("s", "a", pos(3, 0))},
	}
	rd := r.boot()
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, pos(3, 0), rd.Subscribes[0].From)
	_, ok := r.cursor("s")
	require.False(t, ok, "no cursor yet")

	j := member("s", "b", pos(2, 0))
	r.reg.Memberships = append(r.reg.Memberships, j)
	rd = r.step(MembershipChanged{Membership: j})
	c, ok := r.cursor("s")
	require.True(t, ok)
	assert.Equal(t, pos(2, 0), c.Pos, "anchored at the earliest start")
	require.Len(t, rd.Subscribes, 1, "re-subscribed from the anchor")
	assert.Equal(t, pos(2, 0), rd.Subscribes[0].From)

	r.step(batch("s", "c1", logEvent("s", 3, 0), logEvent("s", 4, 0)))
	sends := r.takeSends()
	assert.ElementsMatch(t, []string{"s/3.0", "s/4.0", "s/4.0"}, sendIDs(sends))
}

// A rewind resumes a running backfill where its replay has got to, not at
// its start: a boot's replay of a pending join has handed b the events up
// to 1.2 when c joins, and c's rewind resumes from 1.2 (c's start) rather
// than from b's start at 1.0, which would replay again what b was handed
// (seed 223182, no-head-of-line-blocking: under crash churn every boot and
// every new join replayed the whole timestamp stream for joins that never
// saw their replay end, and a new bot's events came minutes late). Both
// bots still get every event they are owed.
func TestRewindResumesARunningBackfillWhereItsReplayGot(t *testing.T) {
	r := newRig(t, nil)
	r.reg = Registry{
		Bots: []Bot{
			{ID: "a", Secret: []byte("a"), HasKey: true}, {ID: "b", Secret: []byte("b"), HasKey: true},
			{ID: "c", Secret: []byte("c"), HasKey: true},
		},
		Memberships: []Membership{member("s", "a", impl.Position{})},
	}
	r.boot()
	r.step(batch("s", "c1", logEvent("s", 1, 0), logEvent("s", 1, 1), logEvent("s", 1, 2), logEvent("s", 1, 3)))
	for _, s := range r.takeSends() {
		r.reply(s, OutcomeOK)
	}
	jb := member("s", "b", pos(1, 0))
	r.reg.Memberships = append(r.reg.Memberships, jb)
	r.step(MembershipChanged{Membership: jb})

	// Restart: b's backfill is pending, replayed from its start.
	rd := r.boot()
	require.Len(t, rd.Subscribes, 2)
	assert.Equal(t, pos(1, 0), rd.Subscribes[1].From, "the boot rewinds to b's start")
	r.step(batch("s", "c2", logEvent("s", 1, 1), logEvent("s", 1, 2)))
	sends := r.takeSends()
	assert.ElementsMatch(t, []string{"s/1.1", "s/1.2"}, sendIDs(sends))
	for _, s := range sends {
		assert.Equal(t, "b", s.Bot)
		r.reply(s, OutcomeOK)
	}

	jc := member("s", "c", pos(1, 2))
	r.reg.Memberships = append(r.reg.Memberships, jc)
	rd = r.step(MembershipChanged{Membership: jc})
	require.Len(t, rd.Subscribes, 1)
	assert.Equal(t, pos(1, 2), rd.Subscribes[0].From,
		"resumed where b's replay got (and c's start), not at b's start 1.0")

	r.step(batch("s", "c3", logEvent("s", 1, 3)))
	sends = r.takeSends()
	var got []string
	for _, s := range sends {
		got = append(got, s.Bot+":"+s.EventID)
		r.reply(s, OutcomeOK)
	}
	assert.ElementsMatch(t, []string{"b:s/1.3", "c:s/1.3"}, got, "both backfills are owed 1.3; a was handed it before")

	r.step(batch("s", "c4", logEvent("s", 2, 0)))
	got = nil
	for _, s := range r.takeSends() {
		got = append(got, s.Bot+":"+s.EventID)
	}
	assert.ElementsMatch(t, []string{"a:s/2.0", "b:s/2.0", "c:s/2.0"}, got)
	rd = r.boot()
	require.Len(t, rd.Subscribes, 1, "both replays ended and their joins are done: no rewind")
}

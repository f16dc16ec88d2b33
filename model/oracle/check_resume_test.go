package oracle

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// resume-from-cursor, one case per rule: the first subscription of a stream
// after a node read the stored cursors must start exactly at the cursor
// (timestamp streams: within the declared lookback before it).
func TestCheckResumeFromCursor(t *testing.T) {
	logCur := impl.Cursor{Key: impl.CursorKey{Stream: "s1"}, Pos: chkP(5, 2), Token: []byte("s1@5.2")}
	tsCur := impl.Cursor{Key: impl.CursorKey{Stream: "t1"}, Pos: impl.Position{Major: 3_600_000, ID: "e9"}}
	botCur := impl.Cursor{Key: impl.CursorKey{Stream: "s2", Subscriber: "b1"}, Pos: chkP(9, 0)}
	read := Observation{Kind: ObsCursorsRead, Node: "n1", Cursors: []impl.Cursor{logCur, tsCur, botCur}}
	stored := Observation{Kind: ObsCursor, Node: "n2", Cursor: logCur, LogStream: true}
	logSub := func(p impl.Position, token string) Observation {
		return Observation{Kind: ObsSubscribe, Node: "n1", Stream: "s1", LogStream: true, Pos: p, Token: []byte(token)}
	}
	tsSub := func(since int64) Observation {
		return Observation{Kind: ObsSubscribe, Node: "n1", Stream: "t1", Since: since}
	}
	p := chkParams()
	p.TimestampLookback = 10 * time.Minute
	lo := int64(3_600_000 - 600_000)
	cases := []struct {
		name string
		obs  []Observation
		bad  bool
	}{
		{"log at the cursor with its cookie", []Observation{read, logSub(chkP(5, 2), "s1@5.2")}, false},
		{"log earlier", []Observation{read, logSub(chkP(5, 1), "s1@5.2")}, true},
		{"log later", []Observation{read, logSub(chkP(6, 0), "s1@5.2")}, true},
		{"log from the start", []Observation{read, logSub(impl.Position{}, "")}, true},
		{"log without the cookie", []Observation{read, logSub(chkP(5, 2), "")}, true},
		{"fresh sync", []Observation{read, {Kind: ObsSubscribe, Node: "n1", Stream: "s1", LogStream: true, Fresh: true}}, true},
		{"timestamp at the lookback's edge", []Observation{read, tsSub(lo)}, false},
		{"timestamp at the cursor", []Observation{read, tsSub(3_600_000)}, false},
		{"timestamp before the lookback", []Observation{read, tsSub(lo - 1)}, true},
		{"timestamp after the cursor", []Observation{read, tsSub(3_600_001)}, true},
		{"timestamp from zero", []Observation{read, tsSub(0)}, true},
		{"a later rewind is not judged", []Observation{read, logSub(chkP(5, 2), "s1@5.2"), logSub(chkP(1, 0), "")}, false},
		{"a stream with no cursor is not judged", []Observation{read, {Kind: ObsSubscribe, Node: "n1", Stream: "s2", LogStream: true}}, false},
		{"no read, no judgement", []Observation{logSub(chkP(0, 0), "")}, false},
		{"a crash forgets the read", []Observation{read, {Kind: ObsNodeDown, Node: "n1"}, logSub(chkP(0, 0), "")}, false},
		{"another node's read does not count", []Observation{read, {Kind: ObsSubscribe, Node: "n2", Stream: "s1", LogStream: true}}, false},
		{"subscribed before the listing while the store holds the cursor", []Observation{stored, logSub(chkP(5, 2), "s1@5.2")}, true},
		{"subscribed after a crash before the listing", []Observation{stored, read, {Kind: ObsNodeDown, Node: "n1"}, logSub(chkP(5, 2), "s1@5.2")}, true},
		{"subscribed before the listing with no cursor stored", []Observation{{Kind: ObsSubscribe, Node: "n1", Stream: "s2", LogStream: true}}, false},
		{"another stream's cursor does not count", []Observation{stored, {Kind: ObsSubscribe, Node: "n1", Stream: "s3", LogStream: true}}, false},
		{"a subscriber cursor does not count", []Observation{{Kind: ObsCursor, Node: "n2", Cursor: botCur}, {Kind: ObsSubscribe, Node: "n1", Stream: "s2", LogStream: true}}, false},
		{"subscribed after the listing", []Observation{stored, read, logSub(chkP(5, 2), "s1@5.2")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			for _, o := range tc.obs {
				r.add(o)
			}
			vs := chkCheck(t, r, CheckFinal{}, p)
			if tc.bad {
				chkWantOnly(t, vs, InvResumeFromCursor)
			} else if len(vs) > 0 {
				t.Fatalf("want no violation, got %v", vs)
			}
		})
	}
}

// cursor-monotonic, request side: a node never asks for a cursor at or
// behind what its store told it the cursor holds (a read, or a successful
// conditional write); another node's knowledge and a past incarnation's
// do not count.
func TestCheckCursorAskBehindWhatTheNodeWasTold(t *testing.T) {
	key := impl.CursorKey{Stream: "s1"}
	cur := func(p impl.Position) impl.Cursor { return impl.Cursor{Key: key, Pos: p} }
	ask := func(node string, p impl.Position) Observation {
		return Observation{Kind: ObsCursorAsk, Node: node, Cursor: cur(p)}
	}
	told := Observation{Kind: ObsCursorTold, Node: "n1", Cursor: cur(chkP(5, 0))}
	read := Observation{Kind: ObsCursorsRead, Node: "n1", Cursors: []impl.Cursor{cur(chkP(5, 0))}}
	cases := []struct {
		name string
		obs  []Observation
		bad  bool
	}{
		{"ahead of a told write", []Observation{told, ask("n1", chkP(5, 1))}, false},
		{"at a told write", []Observation{told, ask("n1", chkP(5, 0))}, true},
		{"behind a told write", []Observation{told, ask("n1", chkP(4, 9))}, true},
		{"at the cursor read at boot", []Observation{read, ask("n1", chkP(5, 0))}, true},
		{"asked twice before any answer", []Observation{ask("n1", chkP(5, 0)), ask("n1", chkP(5, 0))}, false},
		{"another node was told", []Observation{told, ask("n2", chkP(4, 0))}, false},
		{"a crash forgets", []Observation{told, {Kind: ObsNodeDown, Node: "n1"}, ask("n1", chkP(4, 0))}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newChkRun()
			for _, o := range tc.obs {
				r.add(o)
			}
			vs := chkCheck(t, r, CheckFinal{}, chkParams())
			if tc.bad {
				chkWantOnly(t, vs, InvCursorMonotonic)
			} else if len(vs) > 0 {
				t.Fatalf("want no violation, got %v", vs)
			}
		})
	}
}

package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// A small seed-002 world: node n1 (its clock runs at rate, from chkEpoch
// at boot), source "repo" watched by app A, holding f1@v1 and f2@v1 from
// 1s; the snapshot worker hands it to n1 at once.
type snapWorld struct {
	*chkRun
	rate float64
	req  int64
}

func newSnapWorld(rate float64) *snapWorld {
	w := &snapWorld{chkRun: newChkRun(), rate: rate}
	w.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	w.add(Observation{Kind: ObsSourceState, Stream: "repo", Apps: []string{"A"}})
	w.at(time.Second).add(Observation{Kind: ObsSourceState, Stream: "repo", Apps: []string{"A"},
		Items: []impl.DeliveredItem{{ID: "f1", Version: "v1"}, {ID: "f2", Version: "v1"}}})
	return w
}

func (w *snapWorld) clock() time.Time {
	return chkEpoch.Add(time.Duration(float64(w.now.Sub(chkEpoch)) * w.rate))
}

func (w *snapWorld) at(d time.Duration) *snapWorld { w.chkRun.at(d); return w }

func (w *snapWorld) feed() *snapWorld {
	w.add(Observation{Kind: ObsSourceFed, Node: "n1", Stream: "repo"})
	return w
}

// send makes request number w.req+1 of change id (op CREATE of item at v1).
func (w *snapWorld) send(id, item string) *snapWorld {
	w.req++
	w.add(Observation{Kind: ObsSend, Snapshot: true, Node: "n1", Bot: "A", EventID: id, Stream: "repo",
		Op: "CREATE", Item: item, Version: "v1", Request: w.req, Clock: w.clock()})
	return w
}

// answer ends the latest request on the wire and tells n1; handled: the
// app's handler ran it first.
func (w *snapWorld) answer(id, item string, ok, handled bool) *snapWorld {
	if handled {
		w.add(Observation{Kind: ObsHandled, Snapshot: true, Bot: "A", EventID: id, Stream: "repo",
			Op: "CREATE", Item: item, Version: "v1", Request: w.req})
	}
	out := "ok"
	if !ok {
		out = "status"
	}
	w.add(Observation{Kind: ObsWire, Snapshot: true, Node: "n1", Bot: "A", EventID: id, Request: w.req, Outcome: out})
	w.add(Observation{Kind: ObsResult, Snapshot: true, Node: "n1", Bot: "A", EventID: id, Request: w.req, OK: ok, Outcome: out, Clock: w.clock()})
	return w
}

func (w *snapWorld) end(d time.Duration) *chkRun {
	w.at(d).add(Observation{Kind: ObsHeal})
	w.add(Observation{Kind: ObsEnd})
	return w.chkRun
}

// The seed-002 timing rules (check_snapprompt.go), each shown firing and
// each excuse shown standing it down. MaxAttempts 3, backoff 1s x2 with
// 30% jitter: failure 1 is due again within 1.3s + snapSlack.
func TestCheckSnapshotTiming(t *testing.T) {
	p := chkParams()
	p.BreakerFailures = 4
	failed := func(rate float64) *snapWorld { // f1's first send fails at 2s
		w := newSnapWorld(rate)
		w.at(1500*time.Millisecond).feed().send("c1", "f1")
		w.at(2*time.Second).answer("c1", "f1", false, false)
		return w
	}
	// delivered: f1 is delivered at 2s; f2 is still owed.
	delivered := func() *snapWorld {
		w := newSnapWorld(1)
		w.at(1500*time.Millisecond).feed().send("c1", "f1")
		w.at(2*time.Second).answer("c1", "f1", true, true)
		return w
	}
	// gaveUp: c1 fails MaxAttempts times, each retry on time.
	gaveUp := func() *snapWorld {
		w := failed(1)
		w.at(3500*time.Millisecond).send("c1", "f1").at(4*time.Second).answer("c1", "f1", false, false)
		w.at(7*time.Second).send("c1", "f1").at(7500*time.Millisecond).answer("c1", "f1", false, false)
		return w
	}
	cases := []struct {
		name string
		run  func() *chkRun
		inv  string // "" = no violation
		want string // in the violation's detail
	}{
		{"a retry after its backoff", func() *chkRun {
			return failed(1).at(3500*time.Millisecond).send("c1", "f1").end(time.Minute)
		}, "", ""},
		{"a retry before its backoff", func() *chkRun {
			return failed(1).at(2500*time.Millisecond).send("c1", "f1").end(time.Minute)
		}, InvRetryBackoff, "below that failure's backoff 1s"},
		{"the second failure's backoff is 2s", func() *chkRun {
			w := failed(1).at(3500*time.Millisecond).send("c1", "f1").at(4*time.Second).answer("c1", "f1", false, false)
			return w.at(5500*time.Millisecond).send("c1", "f1").end(time.Minute)
		}, InvRetryBackoff, "failure 2"},
		{"no retry at all", func() *chkRun { return failed(1).end(time.Minute) }, InvRetryBackoff, "no node sent A a change of repo"},
		{"the retry only at the next scan", func() *chkRun {
			return failed(1).at(40*time.Second).feed().send("c1", "f1").end(time.Minute)
		}, InvRetryBackoff, "no node sent A a change of repo"},
		{"a newer change instead of the retry", func() *chkRun {
			return failed(1).at(3*time.Second).send("c2", "f2").end(time.Minute)
		}, "", ""},
		{"no retry: a crash in the window", func() *chkRun {
			w := failed(1).at(5 * time.Second)
			w.add(Observation{Kind: ObsNodeDown, Node: "n1"})
			return w.end(time.Minute)
		}, "", ""},
		{"no retry: the app has the state already", func() *chkRun {
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).feed().send("c1", "f1").at(2*time.Second).answer("c1", "f1", true, true)
			w.send("c2", "f2").at(3*time.Second).answer("c2", "f2", false, true) // processed, then timed out
			return w.end(time.Minute)
		}, "", ""},
		{"a late retry inside a store fault's allowance", func() *chkRun {
			w := failed(1).at(5 * time.Second)
			w.add(Observation{Kind: ObsStoreFault, Node: "n1", Method: "GetDelivered"})
			return w.at(15*time.Second).send("c1", "f1").end(time.Minute)
		}, "", ""},
		{"no retry: a run of the app's failures (a breaker)", func() *chkRun {
			w := failed(1)
			for i := 0; i < 3; i++ {
				w.add(Observation{Kind: ObsResult, Node: "n1", Bot: "A", EventID: "e", Request: int64(100 + i)})
			}
			return w.end(time.Minute)
		}, "", ""},
		{"a slow clock stretches the backoff", func() *chkRun {
			// 1.3s on a clock at half speed is 2.6s: due by 14.6s, not 13.3s.
			return failed(0.5).at(13800*time.Millisecond).send("c1", "f1").end(time.Minute)
		}, "", ""},
		{"given up after MaxAttempts: nothing owed before the next feed", func() *chkRun {
			return gaveUp().end(time.Minute)
		}, "", ""},
		{"given up, then revived by the next feed", func() *chkRun {
			return gaveUp().at(40*time.Second).feed().send("c9", "f1").end(time.Minute)
		}, "", ""},
		{"given up, and the next feed ignored", func() *chkRun {
			return gaveUp().at(40 * time.Second).feed().end(time.Minute)
		}, InvSnapshotProgress, "the state of repo was handed to node n1"},
		{"given up, then sent again under a new id", func() *chkRun {
			return gaveUp().at(20*time.Second).send("c9", "f1").end(time.Minute)
		}, InvBoundedRetry, "under a new webhook-id"},
		{"the next change right after a 2xx", func() *chkRun {
			return delivered().at(2100*time.Millisecond).send("c2", "f2").end(time.Minute)
		}, "", ""},
		{"no next change after a 2xx", func() *chkRun { return delivered().end(time.Minute) }, InvSnapshotProgress, "no node sent the app its next change"},
		{"the next change only at the next scan", func() *chkRun {
			return delivered().at(40*time.Second).feed().send("c2", "f2").end(time.Minute)
		}, InvSnapshotProgress, "no node sent the app its next change"},
		{"a delivered change sent again under a new id", func() *chkRun {
			return delivered().at(3*time.Second).send("c9", "f1").end(time.Minute)
		}, InvIdempotentReplay, "under a new webhook-id after it was told a 2xx of that change under c1"},
		{"a delivered change sent again under its own id", func() *chkRun {
			return delivered().at(3*time.Second).send("c1", "f1").end(time.Minute)
		}, "", ""},
		{"a delivered change decided again after another change", func() *chkRun {
			return delivered().at(3*time.Second).send("c2", "f2").send("c9", "f1").end(time.Minute)
		}, "", ""},
		{"a delivered change sent again after a new feed", func() *chkRun {
			return delivered().at(3*time.Second).feed().send("c9", "f1").end(time.Minute)
		}, "", ""},
		{"a feed while a request is in flight", func() *chkRun {
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).send("c1", "f1").feed()
			return w.at(30*time.Second).answer("c1", "f1", false, false).at(31*time.Second).send("c1", "f1").end(time.Minute)
		}, "", ""},
		{"a request never answered, re-driven once given up", func() *chkRun {
			// Lease 30s + cleanup 5m: given up by 5m31.5s at the latest.
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).feed().send("c1", "f1")
			return w.at(5*time.Minute).send("c1", "f1").end(10 * time.Minute)
		}, "", ""},
		{"a request never answered, and the app never re-driven", func() *chkRun {
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).feed().send("c1", "f1")
			return w.end(10 * time.Minute)
		}, InvSnapshotProgress, "was never told its answer"},
		{"a request never answered, re-driven only at a scan past the bound", func() *chkRun {
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).feed().send("c1", "f1")
			return w.at(6*time.Minute).feed().send("c1", "f1").end(10 * time.Minute)
		}, InvSnapshotProgress, "was never told its answer"},
		{"a request never answered: a crash voids the wait", func() *chkRun {
			w := newSnapWorld(1)
			w.at(1500*time.Millisecond).feed().send("c1", "f1")
			w.at(time.Minute).add(Observation{Kind: ObsNodeDown, Node: "n1"})
			return w.end(10 * time.Minute)
		}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := chkCheck(t, tc.run(), CheckFinal{}, p)
			var got []Violation
			for _, v := range vs {
				if v.Invariant != InvSnapshotConvergence {
					got = append(got, v)
				}
			}
			if tc.inv == "" {
				if len(got) > 0 {
					t.Fatalf("want no violation, got %v", got)
				}
				return
			}
			v := chkWantOnly(t, got, tc.inv)
			if !strings.Contains(v.Detail, tc.want) {
				t.Fatalf("want %q in the detail: %v", tc.want, v)
			}
		})
	}
}

package chaos

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// snapHistory is a recorder with one repository watched by app-0 and
// app-1, published at t0 (before the engine started), t0+1s and t0+2s.
func snapHistory() (*recorder, time.Time) {
	r := newRecorder()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.start = t0.Add(time.Second / 2)
	r.snap = snapRecord{on: true, watch: map[string][]string{"repo-1": {"app-0", "app-1"}}, pubs: map[string][]snapPub{"repo-1": {
		{at: t0, version: 1, items: map[string]string{"a": "1"}},
		{at: t0.Add(time.Second), version: 2, items: map[string]string{"a": "2", "b": "1"}},
		{at: t0.Add(2 * time.Second), version: 3, items: map[string]string{"b": "1"}},
	}}}
	return r, t0
}

func (r *recorder) snapRan(app string, at time.Time, op, id, version string) {
	r.snap.runs = append(r.snap.runs, snapRun{app: app, at: at, c: protocol.RepoChange{Source: "repo-1", Op: op, ID: id, Version: version}})
}

var snapParams = judgeParams{Snapshots: true, Lease: time.Second, WebhookTimeout: time.Second, StoreRetry: 100 * time.Millisecond}

func TestSnapshotRules(t *testing.T) {
	r, t0 := snapHistory()
	// app-0 follows every state; app-1 fails until the end, then is sent
	// the difference from its own (empty) state: one CREATE.
	r.snapRan("app-0", t0.Add(100*time.Millisecond), "CREATE", "a", "1")
	r.snapRan("app-0", t0.Add(1100*time.Millisecond), "UPDATE", "a", "2")
	r.snapRan("app-0", t0.Add(1200*time.Millisecond), "CREATE", "b", "1")
	r.snapRan("app-0", t0.Add(2100*time.Millisecond), "DELETE", "a", "")
	if apart := r.snapConverged(); len(apart) != 1 || !strings.HasPrefix(apart[0], "app-1 on repo-1: lacks b@1") {
		t.Fatalf("before app-1's CREATE: apart %q; want app-1 lacking b@1", apart)
	}
	r.snapRan("app-1", t0.Add(3*time.Second), "CREATE", "b", "1")
	if !r.snapSettled() {
		t.Fatalf("both apps hold the final state, yet the settle sees %q apart", r.snap.settleApart)
	}
	var j judgement
	judgeSnapshots(&j, r, snapParams)
	for _, v := range j.verdicts {
		if v.Verdict != "PASS" {
			t.Errorf("%s: %s (%s); want PASS", v.Invariant, v.Verdict, v.Why)
		}
	}
	if _, n := r.snapProgress(snapParams, t0.Add(time.Minute)); n != 2 {
		t.Errorf("progress judged %d publications; want the 2 made after the engine started", n)
	}
	// A DELETE of a file never given, and a CREATE of one held, do not
	// contradict what the app was delivered (a timed-out change may have
	// been processed); an UPDATE of a file never given does.
	r.snapRan("app-1", t0.Add(3100*time.Millisecond), "DELETE", "z", "")
	r.snapRan("app-1", t0.Add(3200*time.Millisecond), "CREATE", "b", "1")
	if vs := r.snapIsolation(); len(vs) != 0 {
		t.Fatalf("allowed changes judged contradictions: %v", vs)
	}
	r.snapRan("app-1", t0.Add(3300*time.Millisecond), "UPDATE", "a", "2")
	vs := r.snapIsolation()
	if len(vs) != 1 || vs[0].Invariant != oracle.InvSnapshotIsolation || !strings.Contains(vs[0].Detail, "UPDATE a@2") {
		t.Fatalf("an UPDATE of a file app-1 was never given: %v; want one isolation violation naming it", vs)
	}
	// It left app-1 holding a@2, which the repository no longer has.
	if r.snapSettled() {
		t.Fatal("app-1 holds a file the repository deleted, yet the settle sees it converged")
	}
	if vs := r.snapConvergence(); len(vs) != 1 || vs[0].Bot != "app-1" || !strings.Contains(vs[0].Detail, "which the repository no longer has") {
		t.Fatalf("convergence: %v; want app-1 holding a deleted file", vs)
	}
}

// TestSnapshotProgress: the healthy app reaching a change late (beyond the
// bound and its allowances) fails; a kill in between widens the bound by
// its downtime, a lease and a webhook timeout; a change superseded before
// the app reached it is met by the app holding a later state of its files.
func TestSnapshotProgress(t *testing.T) {
	r, t0 := snapHistory()
	// Version 2 came 0.5 s after the engine's start, within a lease: its
	// start-up is allowed as a restart's (a lease and a webhook timeout).
	late := t0.Add(time.Second + snapProgressBound + 2*time.Second)
	r.snapRan("app-0", late.Add(-time.Millisecond), "CREATE", "b", "1")
	if vs, _ := r.snapProgress(snapParams, late.Add(time.Minute)); len(vs) != 0 {
		t.Errorf("version 2's change held within the bound and the start-up allowance: %v; want none", vs)
	}
	r, t0 = snapHistory()
	late = t0.Add(2*time.Second + snapProgressBound + 3*time.Second)
	r.snapRan("app-0", late, "CREATE", "b", "1")
	vs, n := r.snapProgress(snapParams, late.Add(time.Minute))
	// Version 2 changed a (to 2) and b (created): met late, by b@1 and
	// a's absence in version 3. Version 3 deleted a, which the app never
	// held: met at its publication.
	if n != 2 || len(vs) != 1 {
		t.Fatalf("the app held version 2's change %s after it was published: %d cases, violations %v; want 2 and 1 (version 2, met by version 3's state of a)", late.Sub(t0.Add(time.Second)), n, vs)
	}
	if !strings.Contains(vs[0].Detail, "version 2 of repo-1 changed a, b") {
		t.Errorf("violations %v; want version 2 and its files named", vs)
	}
	r.kills = []kill{{at: t0.Add(2500 * time.Millisecond), up: t0.Add(5 * time.Second)}}
	if vs, _ := r.snapProgress(snapParams, late.Add(time.Minute)); len(vs) != 0 {
		t.Errorf("with a 2.5 s kill in between (allowance 4.5 s): %v; want none", vs)
	}
	// A kill long before the publications whose process stayed down
	// across them allows its downtime too.
	r.kills = []kill{{at: t0.Add(-5 * time.Second), up: t0.Add(8 * time.Second)}}
	if vs, _ := r.snapProgress(snapParams, late.Add(time.Minute)); len(vs) != 0 {
		t.Errorf("with the engine down from 5 s before to 8 s after: %v; want none", vs)
	}
	// Never reached: judged to the end of the settle.
	r2, _ := snapHistory()
	r2.kills = nil
	if vs, _ := r2.snapProgress(snapParams, t0.Add(time.Minute)); len(vs) != 1 || !strings.Contains(vs[0].Detail, "still did not hold it") {
		t.Errorf("never reached: %v; want 1 violation saying so", vs)
	}
}

// churn is a repository whose file f-N is created every second for n
// seconds from t0 (the engine started before), and app-0 running each
// CREATE lag after its publication.
func churn(n int, lag time.Duration) (*recorder, time.Time) {
	r := newRecorder()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.start = t0.Add(-time.Second)
	r.snap = snapRecord{on: true, watch: map[string][]string{"repo-1": {"app-0"}}, pubs: map[string][]snapPub{}}
	items := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("f-%03d", i)
		items = maps.Clone(items)
		items[id] = "1"
		at := t0.Add(time.Duration(i) * time.Second)
		r.snap.pubs["repo-1"] = append(r.snap.pubs["repo-1"], snapPub{at: at, version: int64(i + 1), items: items})
		r.snap.runs = append(r.snap.runs, snapRun{app: "app-0", at: at.Add(lag), c: protocol.RepoChange{Source: "repo-1", Op: "CREATE", ID: id, Version: "1"}})
	}
	return r, t0
}

// TestSnapshotProgressUnderChurn: an engine that delivers each change 1.5 s
// after its publication, while the repository changes every second, never
// lets the app hold an exact published state until the changes stop; it
// is not slow, and passes. One that delivers each change 30 s late (the
// snapshot-slow-feed plant) fails on every change.
func TestSnapshotProgressUnderChurn(t *testing.T) {
	r, t0 := churn(40, 1500*time.Millisecond)
	if vs, n := r.snapProgress(snapParams, t0.Add(time.Minute)); len(vs) != 0 || n != 40 {
		t.Errorf("each change 1.5 s late: %d cases, violations %v; want 40 and none", n, vs)
	}
	r, t0 = churn(40, 30*time.Second)
	if vs, _ := r.snapProgress(snapParams, t0.Add(2*time.Minute)); len(vs) != 40 {
		t.Errorf("each change 30 s late: %d violations; want 40", len(vs))
	}
}

// TestSnapshotsNotDeclared: an engine that does not declare the capability
// gets the three checks "not judged", with the reason.
func TestSnapshotsNotDeclared(t *testing.T) {
	r := newRecorder()
	var j judgement
	judgeSnapshots(&j, r, judgeParams{})
	if len(j.verdicts) != 3 {
		t.Fatalf("%d verdicts; want 3", len(j.verdicts))
	}
	for _, v := range j.verdicts {
		if v.Verdict != notJudged || !strings.Contains(v.Why, "does not declare snapshot sources") {
			t.Errorf("%s: %s %q; want not judged, saying the engine does not declare them", v.Invariant, v.Verdict, v.Why)
		}
	}
	if !r.snapSettled() {
		t.Error("the settle waits on snapshot convergence of an engine that does not declare it")
	}
}

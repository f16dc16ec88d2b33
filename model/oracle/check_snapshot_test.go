package oracle

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

func (r *chkRun) source(items ...string) *chkRun {
	var its []impl.DeliveredItem
	for i := 0; i+1 < len(items); i += 2 {
		its = append(its, impl.DeliveredItem{ID: items[i], Version: items[i+1]})
	}
	return r.add(Observation{Kind: ObsSourceState, Stream: "repo", Apps: []string{"A", "B"}, Items: its})
}

// change sends and handles one change to app as request req.
func (r *chkRun) change(app, op, item, version string, req int64) *chkRun {
	id := "snapshot:repo:" + op + ":" + item + "@" + version
	o := Observation{Snapshot: true, Bot: app, EventID: id, Stream: "repo", Op: op, Item: item, Version: version, Request: req}
	send, handled := o, o
	send.Kind, handled.Kind = ObsSend, ObsHandled
	return r.add(send).add(handled)
}

func snapRun() *chkRun {
	r := newChkRun()
	r.add(Observation{Kind: ObsNodeUp, Node: "n1", Clock: chkEpoch})
	r.at(time.Second).source("f1", "v1", "f2", "v1")
	return r
}

func snapEnd(r *chkRun) *chkRun {
	return r.add(Observation{Kind: ObsHeal}).at(2 * time.Minute).add(Observation{Kind: ObsEnd})
}

func TestCheckSnapshotConvergedAppsPass(t *testing.T) {
	r := snapRun()
	r.change("A", "CREATE", "f1", "v1", 1).change("A", "CREATE", "f2", "v1", 2)
	r.change("B", "CREATE", "f1", "v1", 3).change("B", "CREATE", "f2", "v1", 4)
	r.at(30*time.Second).source("f1", "v2")
	r.at(time.Minute).source("f1", "v3")
	r.change("A", "UPDATE", "f1", "v3", 5).change("A", "DELETE", "f2", "", 6)
	// B: the UPDATE to v2 (send 7) is overtaken by the one to v3 (send 8)
	// and processed late: the app keeps v3. A DELETE of a file it never
	// got (seed 002's edge case) is fine.
	r.change("B", "UPDATE", "f1", "v3", 8).change("B", "DELETE", "f2", "", 9).change("B", "UPDATE", "f1", "v2", 7)
	r.change("B", "DELETE", "f9", "", 10)
	if vs := chkCheck(t, snapEnd(r), CheckFinal{}, chkParams()); len(vs) > 0 {
		t.Fatalf("converged apps: %v", vs)
	}
}

func TestCheckSnapshotConvergence(t *testing.T) {
	r := snapRun()
	r.change("A", "CREATE", "f1", "v1", 1).change("A", "CREATE", "f2", "v1", 2)
	r.change("B", "CREATE", "f2", "v1", 3) // B never gets f1
	v := chkWantOnly(t, chkCheck(t, snapEnd(r), CheckFinal{}, chkParams()), InvSnapshotConvergence)
	if v.Bot != "B" || !strings.Contains(v.Detail, "lacks f1@v1") {
		t.Fatalf("%v", v)
	}
}

func TestCheckSnapshotIsolation(t *testing.T) {
	r := snapRun()
	r.change("A", "CREATE", "f1", "v1", 1).change("A", "CREATE", "f2", "v1", 2)
	r.change("B", "CREATE", "f2", "v1", 3)
	r.at(time.Minute).source("f1", "v2", "f2", "v1")
	r.change("A", "UPDATE", "f1", "v2", 4)
	r.change("B", "UPDATE", "f1", "v2", 5) // computed from A's baseline: B never had f1
	vs := chkCheck(t, snapEnd(r), CheckFinal{}, chkParams())
	v := chkWantOnly(t, vs, InvSnapshotIsolation)
	if v.Bot != "B" || !strings.Contains(v.Detail, "UPDATE of f1") {
		t.Fatalf("%v", v)
	}
}

func TestCheckSnapshotPhantomVersion(t *testing.T) {
	r := snapRun()
	r.change("A", "CREATE", "f1", "v1", 1).change("A", "CREATE", "f2", "v7", 2)
	r.change("B", "CREATE", "f1", "v1", 3).change("B", "CREATE", "f2", "v1", 4)
	vs := chkCheck(t, snapEnd(r), CheckFinal{}, chkParams())
	found := false
	for _, v := range vs {
		found = found || (v.Invariant == InvNoPhantomDelivery && strings.Contains(v.Detail, "a version the source never had"))
	}
	if !found {
		t.Fatalf("phantom version not reported: %v", vs)
	}
}

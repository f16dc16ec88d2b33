package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

func explicitWorld() Workload {
	w := Workload{
		Nodes: 1, Produce: 20 * time.Second, FaultWindow: 2 * time.Minute, Liveness: 30 * time.Minute,
		HOLBound: 2 * time.Minute, BatchMax: 4, CursorWriteMax: 100 * time.Millisecond,
		RestartMin: time.Second, RestartMax: time.Second, ReceiverWindow: time.Hour, ReceiverEntries: 1000,
	}
	st := StreamSpec{Name: "s", Kind: engine.LogStream, SealEvery: 5 * time.Second,
		LatencyMin: 10 * time.Millisecond, LatencyMax: 20 * time.Millisecond, ExplicitEvents: true}
	for i := 1; i <= 6; i++ {
		st.Explicit = append(st.Explicit, EventSpec{At: time.Duration(i) * time.Second, ID: "e" + string(rune('0'+i))})
	}
	w.Streams = []StreamSpec{st}
	w.Bots = []BotSpec{{ID: "a", Secret: []byte("ka"), LatencyMin: 5 * time.Millisecond, LatencyMax: 10 * time.Millisecond},
		{ID: "b", Secret: []byte("kb"), LatencyMin: 5 * time.Millisecond, LatencyMax: 10 * time.Millisecond}}
	w.Members = []MemberSpec{{Stream: "s", Bot: "a"}, {Stream: "s", Bot: "b"}}
	return w
}

func faultRecords(r *Result, kind faults.Kind) []Record {
	var out []Record
	for _, rec := range r.Trace {
		if rec.Kind == "fault" && len(rec.Fields) > 0 && rec.Fields[0].V == string(kind) {
			out = append(out, rec)
		}
	}
	return out
}

func recField(r Record, k string) string {
	for _, f := range r.Fields {
		if f.K == k {
			return f.V
		}
	}
	return ""
}

// Scheduled faults fire exactly where the schedule says, and nowhere else.
func TestScheduledFaultsFireWhereTold(t *testing.T) {
	w := explicitWorld()
	none := faults.None()
	sched := []Fault{
		{Kind: faults.Webhook5xx, Bot: "a", Event: "e3", Attempt: 1, Status: 502},
		{Kind: faults.Crash, Node: "node-1", At: 10 * time.Second, RestartAfter: 30 * time.Second},
		{Kind: faults.LateKey, Bot: "b", At: 45 * time.Second},
		{Kind: faults.ClockOffset, Node: "node-1", Incarnation: 2, Offset: time.Minute},
	}
	r, err := Run(Config{Seed: 1, Workload: &w, Plan: &none, Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Violations {
		t.Errorf("%v", v)
	}
	five := faultRecords(r, faults.Webhook5xx)
	if len(five) != 1 || recField(five[0], "event") != "e3" || recField(five[0], "status") != "502" || five[0].Actor != "bot/a" {
		t.Fatalf("5xx records: %v", five)
	}
	crashes := faultRecords(r, faults.Crash)
	if len(crashes) != 1 || crashes[0].Time.Before(Epoch.Add(10*time.Second)) {
		t.Fatalf("crash records: %v", crashes)
	}
	var boots []time.Time
	for _, rec := range r.Trace {
		if rec.Actor == "node-1" && rec.Kind == "boot" {
			boots = append(boots, rec.Time)
		}
		if rec.Actor == "node-1" && rec.Kind == "crash" && recField(rec, "restart_in") != "30s" {
			t.Fatalf("crash record %v: want restart_in=30s", rec)
		}
		if rec.Actor == "node-1" && rec.Kind == "send" && recField(rec, "bot") == "b" && rec.Time.Before(Epoch.Add(45*time.Second)) {
			t.Fatalf("bot b was sent to before it published its key: %v", rec)
		}
	}
	if len(boots) != 2 || boots[1].Sub(crashes[0].Time) != 30*time.Second {
		t.Fatalf("boots %v after a crash at %v", boots, crashes[0].Time)
	}
	if off := faultRecords(r, faults.ClockOffset); len(off) != 1 || recField(off[0], "incarnation") != "2" {
		t.Fatalf("clock offset records %v", off)
	}
	if r.Counters.Obligations != 12 || r.Counters.Retries == 0 {
		t.Fatalf("counters %+v", r.Counters)
	}
}

func TestValidateScheduleNamesTheProblem(t *testing.T) {
	w := explicitWorld()
	for _, tc := range []struct {
		f    Fault
		want string
	}{
		{Fault{Kind: faults.Crash, Node: "node-7"}, `node "node-7"`},
		{Fault{Kind: faults.Webhook5xx, Bot: "zz"}, `bot "zz"`},
		{Fault{Kind: faults.UpstreamDuplicate, Stream: "nope"}, `stream "nope"`},
		{Fault{Kind: faults.StoreError, Node: "node-1", Method: "Drop"}, `method "Drop"`},
		{Fault{Kind: faults.StoreAmbiguous, Node: "node-1", Method: "ListMessages"}, "is a read"},
		{Fault{Kind: faults.Webhook5xx, Bot: "a", Status: 404}, "not a 5xx"},
		{Fault{Kind: faults.Webhook5xx, Bot: "a", At: time.Minute, Until: time.Second}, "at <= until"},
	} {
		err := ValidateSchedule(w, []Fault{tc.f})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

func TestPermute(t *testing.T) {
	if got := permute([]string{"a", "b", "c"}, []int{2, 0, 1}); strings.Join(got, "") != "bca" {
		t.Fatalf("permute = %v", got)
	}
	if got := permute([]string{"a", "b", "c"}, []int{0, 0, 1}); strings.Join(got, "") != "cba" {
		t.Fatalf("a bad order must reverse, got %v", got)
	}
}

// Two apps watch a snapshot source; one fails for a while. Both converge
// on the reference engine, and the checker sees every change handled.
func TestSnapshotSourcesConverge(t *testing.T) {
	w := explicitWorld()
	w.Sources = []SourceSpec{{Name: "repo", Apps: []string{"a", "b"}, ScanEvery: 30 * time.Second, Updates: []SourceUpdate{
		{At: time.Second, Items: []impl.DeliveredItem{{ID: "f1", Version: "v1"}, {ID: "f2", Version: "v1"}}},
		{At: 15 * time.Second, Items: []impl.DeliveredItem{{ID: "f1", Version: "v2"}}},
	}}}
	none := faults.None()
	sched := []Fault{{Kind: faults.WebhookRefused, Bot: "b", At: 0, Until: time.Minute}}
	r, err := Run(Config{Seed: 3, Workload: &w, Plan: &none, Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Violations {
		t.Errorf("%v", v)
	}
	if r.Stats.SnapshotChanges < 4 {
		t.Fatalf("only %d snapshot changes handled", r.Stats.SnapshotChanges)
	}
	shared, err := Run(Config{Seed: 3, Workload: &w, Plan: &none, Schedule: sched, Bugs: engine.Bugs{SharedSnapshotBaseline: true}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range shared.Violations {
		found = found || v.Invariant == oracle.InvSnapshotConvergence || v.Invariant == oracle.InvSnapshotIsolation
	}
	if !found {
		t.Fatalf("a shared snapshot baseline went unnoticed: %v", shared.Violations)
	}
}

func TestCrashPointsMapToKinds(t *testing.T) {
	seen := map[faults.Kind]bool{}
	for _, p := range []engine.CrashPoint{engine.CrashAfterStoreWriteBeforeSend, engine.CrashAfterSendBeforeAck, engine.CrashAfterProcessBeforeCursor} {
		k, ok := crashKind(p)
		if !ok || !k.Valid() || seen[k] {
			t.Fatalf("crash point %s maps to %q (ok=%v)", p, k, ok)
		}
		seen[k] = true
	}
	if _, ok := crashKind("elsewhere"); ok {
		t.Fatal("an unknown crash point mapped to a kind")
	}
}

package scenarios

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/sim"
	"go.yaml.in/yaml/v3"
)

// A run rewritten with an explicit workload and fault schedule replays the
// original: the same deliveries, duplicates, crashes and violations, for
// random seeds with and without known bugs.
func TestFromResultReplaysTheRun(t *testing.T) {
	type tc struct {
		seed uint64
		bug  string
	}
	var cases []tc
	for seed := uint64(1); seed <= 30; seed++ {
		cases = append(cases, tc{seed, ""})
	}
	for i, v := range Variants() {
		cases = append(cases, tc{uint64(100 + i), v.Name})
	}
	same := 0
	for _, c := range cases {
		var bugs []string
		if c.bug != "" {
			bugs = []string{c.bug}
		}
		b, _, _ := ParseBugs(bugs)
		orig, err := sim.Run(sim.Config{Seed: c.seed, Bugs: b})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := FromResult(orig, nil, bugs)
		if err != nil {
			t.Fatalf("seed %d: %v", c.seed, err)
		}
		data, err := sc.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Load("rewritten.yaml", data)
		if err != nil {
			t.Fatalf("seed %d: the rewritten scenario does not load: %v\n%s", c.seed, err, data)
		}
		again, err := back.Run()
		if err != nil {
			t.Fatalf("seed %d: %v", c.seed, err)
		}
		// Every fault fires again, exactly where it did: none vanished in
		// the rewrite.
		if of, af := firedFaults(orig), firedFaults(again); !reflect.DeepEqual(of, af) {
			t.Errorf("seed %d %s: the replay injected %d faults, the original %d; first difference %s",
				c.seed, c.bug, len(af), len(of), firstDiff(of, af))
			continue
		}
		oc, ac := orig.Counters, again.Counters
		if oc != ac || !slices.Equal(Invariants(orig), Invariants(again)) {
			t.Logf("seed %d %s: original %+v %v\n rewritten %+v %v", c.seed, c.bug, oc, Invariants(orig), ac, Invariants(again))
			continue
		}
		same++
	}
	if same < len(cases) {
		t.Errorf("%d of %d rewritten runs replayed their original exactly", same, len(cases))
	}
}

// firedFaults lists the faults r injected. A window fault (an outage with
// an until) is listed once: the original run records where the outage
// began, a replay records every request the window refuses.
func firedFaults(r *sim.Result) []faults.Fault {
	var out []faults.Fault
	type window struct {
		kind faults.Kind
		bot  string
		till time.Duration
	}
	open := map[window]bool{}
	for _, f := range r.Fired {
		if f.Until != 0 {
			w := window{f.Kind, f.Bot, f.Until}
			if open[w] {
				continue
			}
			open[w] = true
		}
		out = append(out, f.Fault)
	}
	// Faults of one instant in a fixed order: a replay schedules a
	// membership change up front, so it runs before a node's timer of the
	// same instant, where the original's per-minute tick ran after it
	// (seed 1: a store fault of the timer's claim and a churn at 1h5m).
	slices.SortStableFunc(out, func(a, b faults.Fault) int {
		if c := cmp.Compare(a.At, b.At); c != 0 {
			return c
		}
		return strings.Compare(a.String(), b.String())
	})
	return out
}

func firstDiff(a, b []faults.Fault) string {
	for i := range min(len(a), len(b)) {
		if !reflect.DeepEqual(a[i], b[i]) {
			return fmt.Sprintf("at %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	return "in length"
}

// Every field of faults.Fault survives the trip to a scenario file and
// back (fileFault, Marshal, the decoder, Fault.fault). A field added to
// faults.Fault without a place in the file, or a key renamed on one side
// only, fails here instead of silently vanishing from minimized runs.
func TestFaultFileRoundTrip(t *testing.T) {
	// onlyFor: fields that one kind alone may set (the file refuses them
	// elsewhere).
	onlyFor := map[string]faults.Kind{"Offset": faults.ClockOffset, "PPM": faults.ClockDrift, "Order": faults.UpstreamReorder,
		"Never": faults.LateKey, "Member": faults.MembershipChurn, "Back": faults.MembershipChurn}
	typ := reflect.TypeOf(faults.Fault{})
	for _, k := range faults.All() {
		var f faults.Fault
		v := reflect.ValueOf(&f).Elem()
		for i := range typ.NumField() {
			fd := typ.Field(i)
			if only, ok := onlyFor[fd.Name]; ok && only != k {
				continue
			}
			switch fv := v.Field(i); fd.Type {
			case reflect.TypeOf(faults.Kind("")):
				fv.SetString(string(k))
			case reflect.TypeOf(time.Duration(0)):
				fv.SetInt(int64(time.Duration(i+1) * 90 * time.Second))
			case reflect.TypeOf(""):
				fv.SetString(strings.ToLower(fd.Name) + "-x")
			case reflect.TypeOf(0):
				fv.SetInt(int64(i + 2))
			case reflect.TypeOf(int64(0)):
				fv.SetInt(250) // ppm: 900ms an hour, exact in the file's drift
			case reflect.TypeOf([]int{}):
				fv.Set(reflect.ValueOf([]int{1, 0}))
			case reflect.TypeOf(false):
				fv.SetBool(true)
			default:
				t.Fatalf("faults.Fault.%s has a type (%s) this test does not fill; teach it, and the file format", fd.Name, fd.Type)
			}
			if fv := v.Field(i); fv.IsZero() {
				t.Fatalf("faults.Fault.%s left zero", fd.Name)
			}
		}
		f.Until = f.At + time.Hour
		f.Status = 503 // the file takes HTTP statuses only
		data, err := yaml.Marshal(fileFault(f))
		if err != nil {
			t.Fatal(err)
		}
		var n yaml.Node
		if err := yaml.Unmarshal(data, &n); err != nil {
			t.Fatal(err)
		}
		d := &decoder{file: "roundtrip"}
		ff := d.fault(n.Content[0], "faults.schedule[0]")
		if d.err != nil {
			t.Fatalf("%s: the file form %s does not decode: %v", k, data, d.err)
		}
		back, err := ff.fault()
		if err != nil {
			t.Fatalf("%s: %v (file form %s)", k, err, data)
		}
		bv := reflect.ValueOf(back)
		for i := range typ.NumField() {
			if !reflect.DeepEqual(v.Field(i).Interface(), bv.Field(i).Interface()) {
				t.Errorf("%s: field %s changed on its way through a file: %v became %v (file form %s)",
					k, typ.Field(i).Name, v.Field(i).Interface(), bv.Field(i).Interface(), data)
			}
		}
	}
}

// The events a rewritten run lists come from the run's typed record
// (sim.Result.Produced), not from the trace text; they are the trace's
// produce records, one for one.
func TestRewrittenEventsAreTheProducedOnes(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		r, err := sim.Run(sim.Config{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		s, err := FromResult(r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var fromTrace []string
		for _, rec := range r.Trace {
			if rec.Kind != "produce" || !strings.HasPrefix(rec.Actor, "upstream/") {
				continue
			}
			id, producer := "", "0"
			for _, f := range rec.Fields {
				switch f.K {
				case "event":
					id = f.V
				case "producer":
					if f.V != "" {
						producer = f.V
					}
				}
			}
			fromTrace = append(fromTrace, fmt.Sprintf("%s %v %s %s", strings.TrimPrefix(rec.Actor, "upstream/"), rec.Time.Sub(sim.Epoch), id, producer))
		}
		var got []string
		for _, e := range s.Workload.Events {
			got = append(got, fmt.Sprintf("%s %v %s %d", e.Stream, e.At.D(), e.ID, e.Producer))
		}
		if !reflect.DeepEqual(got, fromTrace) || len(got) == 0 {
			t.Fatalf("seed %d: %d events rewritten, %d in the trace; first difference %s", seed, len(got), len(fromTrace), firstStringDiff(got, fromTrace))
		}
	}
}

func firstStringDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i] + " vs " + b[i]
		}
	}
	return "in length"
}

package scenarios

import (
	"slices"
	"testing"

	"github.com/deliverysim/deliverysim/sim"
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

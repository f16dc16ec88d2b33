package triage

import (
	"encoding/json"
	"fmt"
	"testing"
)

// sweep builds a sweep report of seeds lo-hi failing the given seeds
// (seed -> invariants), first violation text prefixed by text.
func sweep(t *testing.T, lo, hi uint64, text string, failing map[uint64][]string) []byte {
	t.Helper()
	type fs struct {
		Seed       uint64   `json:"seed"`
		Invariants []string `json:"invariants"`
		First      string   `json:"first"`
	}
	rep := map[string]any{"schema_version": 1, "seeds": fmt.Sprintf("%d-%d", lo, hi), "backend": "memory",
		"plan": "drawn per seed", "seeds_run": hi - lo + 1, "errors": []any{}}
	list := []fs{}
	for s := lo; s <= hi; s++ {
		if invs, ok := failing[s]; ok {
			list = append(list, fs{Seed: s, Invariants: invs, First: text + fmt.Sprint(s)})
		}
	}
	rep["failing_seeds"], rep["failing_seeds_total"] = list, len(list)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t *testing.T, name string, data []byte) Run {
	t.Helper()
	r, err := Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ids(fs []Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.ID())
	}
	return out
}

func TestClassifyByIdentityNotText(t *testing.T) {
	old := parse(t, "old", sweep(t, 1, 10, "old wording ", map[uint64][]string{2: {"no-silent-loss"}, 3: {"liveness"}}))
	// Seed 2 fails again, described differently; seed 3 passes; seed 4
	// fails for the first time; seed 2 also breaks a second invariant.
	now := parse(t, "new", sweep(t, 1, 10, "new wording ", map[uint64][]string{2: {"no-silent-loss", "liveness"}, 4: {"liveness"}}))
	res, err := Classify(old, []Run{now})
	if err != nil {
		t.Fatal(err)
	}
	want := map[Status][]string{
		New:      {"liveness@seed=2", "liveness@seed=4"},
		Ongoing:  {"no-silent-loss@seed=2"},
		Resolved: {"liveness@seed=3"},
	}
	for _, st := range Statuses() {
		if got := ids(res.Classes[st]); fmt.Sprint(got) != fmt.Sprint(append([]string{}, want[st]...)) {
			t.Errorf("%s: %v, want %v", st, got, want[st])
		}
	}
	if d := res.Classes[Ongoing][0].Detail; d != "new wording 2" {
		t.Errorf("an ongoing finding carries the newest text; got %q", d)
	}
}

func TestSeedsOutsideTheNewRangeAreUnjudged(t *testing.T) {
	old := parse(t, "old", sweep(t, 1, 10, "", map[uint64][]string{5: {"liveness"}}))
	now := parse(t, "new", sweep(t, 11, 20, "", nil))
	res, err := Classify(old, []Run{now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count(Resolved) != 0 || len(res.Unjudged) != 1 {
		t.Errorf("a seed the new sweep did not run is not resolved: resolved %v, unjudged %v", ids(res.Classes[Resolved]), ids(res.Unjudged))
	}
}

func TestTruncatedListJudgesOnlyUpToItsLastSeed(t *testing.T) {
	// A sweep lists the lowest failing seeds only: beyond the last listed
	// one, a seed missing from the list may have failed.
	var rep map[string]any
	if err := json.Unmarshal(sweep(t, 1, 100, "", map[uint64][]string{7: {"liveness"}}), &rep); err != nil {
		t.Fatal(err)
	}
	rep["failing_seeds_total"] = 5
	data, _ := json.Marshal(rep)
	now := parse(t, "new", data)
	for seed, want := range map[uint64]bool{3: true, 7: true, 8: false, 50: false} {
		if got := now.Judged(Finding{Invariant: "liveness", Seed: &seed}); got != want {
			t.Errorf("seed %d judged %v, want %v", seed, got, want)
		}
	}
}

func TestTriageReportReadBackMakesRegressed(t *testing.T) {
	fail := map[uint64][]string{4: {"liveness"}}
	red := parse(t, "red", sweep(t, 1, 10, "", fail))
	green := parse(t, "green", sweep(t, 1, 10, "", nil))
	res, err := Classify(red, []Run{green})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(NewReport(res, "red", []string{"green"}, []Status{New, Regressed}))
	if err != nil {
		t.Fatal(err)
	}
	base := parse(t, "night", data)
	res, err = Classify(base, []Run{parse(t, "red-again", sweep(t, 1, 10, "", fail))})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(res.Classes[Regressed])) != "[liveness@seed=4]" || res.Count(New) != 0 {
		t.Errorf("regressed %v, new %v; want liveness@seed=4 regressed", ids(res.Classes[Regressed]), ids(res.Classes[New]))
	}
	if len(res.Known) != 0 {
		t.Errorf("a regressed finding is no longer known resolved: %v", ids(res.Known))
	}
}

func TestFlakyAcrossNewRuns(t *testing.T) {
	old := parse(t, "old", sweep(t, 1, 10, "", nil))
	a := parse(t, "a", sweep(t, 1, 10, "", map[uint64][]string{6: {"liveness"}}))
	b := parse(t, "b", sweep(t, 1, 10, "", nil))
	res, err := Classify(old, []Run{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(res.Classes[Flaky])) != "[liveness@seed=6]" || res.Count(New) != 0 {
		t.Errorf("flaky %v new %v", ids(res.Classes[Flaky]), ids(res.Classes[New]))
	}
}

func TestOtherKindsAndSettingsAreRefused(t *testing.T) {
	old := parse(t, "old", sweep(t, 1, 10, "", nil))
	other := old
	other.Settings = "backend=postgres"
	if _, err := Classify(old, []Run{other}); err == nil {
		t.Error("other settings compared")
	}
	sc := parse(t, "sc", []byte(`{"schema_version":1,"scenarios":[]}`))
	if _, err := Classify(old, []Run{sc}); err == nil {
		t.Error("a scenarios report compared with a sweep report")
	}
	for _, bad := range []string{`{"schema_version":1}`, `{"schema_version":2,"failing_seeds":[]}`, `[]`} {
		if _, err := Parse("bad", []byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestScenarioCertifyAndChaosFindings(t *testing.T) {
	sc := parse(t, "sc", []byte(`{"schema_version":1,"scenarios":[
		{"name":"a","expected_violations":[],"ran":true,"got_violations":["liveness"],"passed":false},
		{"name":"b","expected_violations":["no-silent-loss"],"ran":true,"got_violations":[],"passed":false},
		{"name":"c","expected_violations":[],"ran":true,"passed":true}]}`))
	if got := fmt.Sprint(ids(sortedFailing(sc))); got != "[liveness@check=a expected no-silent-loss@check=b]" {
		t.Errorf("scenarios: %s", got)
	}
	if !sc.Judged(Finding{Invariant: "liveness", Check: "c"}) {
		t.Error("a scenario that ran is judged")
	}
	cert := parse(t, "cert", []byte(`{"schema_version":1,"backend":"memstore","guarantees":[],"runs":[{"variant":""}],"results":[
		{"name":"Contract/Ack","group":"Contract","status":"fail","summary":"lost"},
		{"name":"Contract/Claim","group":"Contract","status":"skip"}]}`))
	if got := fmt.Sprint(ids(sortedFailing(cert))); got != "[Contract@check=Contract/Ack]" {
		t.Errorf("certify: %s", got)
	}
	if cert.Judged(Finding{Invariant: "Contract", Check: "Contract/Claim"}) {
		t.Error("a skipped check is judged")
	}
	chaos := parse(t, "chaos", []byte(`{"schema_version":1,"seed":9,"engine_cmd":["x"],"verdicts":[],"args":["--seed","9","--kills","2"],
		"invariants":{"liveness":"FAIL","no-silent-loss":"PASS","cursor-progress":"not judged"},
		"violations":[{"invariant":"liveness","detail":"d1"},{"invariant":"liveness","detail":"d2"}]}`))
	if got := fmt.Sprint(ids(sortedFailing(chaos))); got != "[liveness@seed=9]" || chaos.Settings != "--kills 2" {
		t.Errorf("chaos: %s, settings %q", got, chaos.Settings)
	}
	nine := uint64(9)
	if !chaos.Judged(Finding{Invariant: "no-silent-loss", Seed: &nine}) || chaos.Judged(Finding{Invariant: "cursor-progress", Seed: &nine}) {
		t.Error("chaos judges PASS and FAIL verdicts only")
	}
}

func sortedFailing(r Run) []Finding {
	var fs []Finding
	for _, f := range r.Failing {
		fs = append(fs, f)
	}
	sortFindings(fs)
	return fs
}

package scenarios

import (
	"path/filepath"
	"testing"
)

// Every scenario of the library loads, passes on the engine it configures
// (the reference engine, for all of them), and fails as it says with each
// known bug it claims to catch.
func TestLibraryScenarios(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 15 {
		t.Errorf("the library has %d scenarios; every failure story of the seeds needs one", len(all))
	}
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			r, err := s.Run()
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := s.Matches(r); !ok {
				t.Errorf("reference engine: %s", why)
			}
			if r.Counters.Obligations+r.Stats.SnapshotChanges == 0 {
				t.Errorf("the scenario exercises nothing: no obligations and no snapshot changes")
			}
			for _, c := range s.Catches {
				r, err := s.Run(c.Bug)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, v := range r.Violations {
					found = found || v.Invariant == c.Invariant
				}
				if !found {
					t.Errorf("with %s: no %s violation (got %v)", c.Bug, c.Invariant, Invariants(r))
				}
			}
		})
	}
}

// testdata/regress holds scenarios minimized from failures the harness
// itself got wrong (or the engine, once fixed): each must pass now, on the
// reference engine, and exercise something.
func TestRegressionScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "regress", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no regression scenarios found (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Run()
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Violations) > 0 {
				t.Errorf("violations: %v", Invariants(r))
			}
			if r.Counters.Obligations+r.Stats.SnapshotChanges == 0 {
				t.Errorf("the scenario exercises nothing")
			}
		})
	}
}

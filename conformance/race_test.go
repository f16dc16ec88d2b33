package conformance_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/conformance"
)

// raceRuns is how many times TestRaceCatchRate* run the planted race
// (DELIVERYSIM_RACE_RUNS, e.g. 20); unset, they do not run: the rate is
// measured by hand, and make test runs TestPlantedRacesAreCaught.
func raceRuns(t *testing.T) int {
	n, _ := strconv.Atoi(os.Getenv("DELIVERYSIM_RACE_RUNS"))
	if n <= 0 {
		t.Skip("set DELIVERYSIM_RACE_RUNS=20 to measure the catch rate")
	}
	return n
}

// catchRate runs the Linearizability group on f runs times, each with a
// fresh seed, and returns how many runs failed it; it fails the test if
// the group did not run.
func catchRate(t *testing.T, f conformance.Factory, runs int) int {
	t.Helper()
	caught := 0
	for i := range runs {
		cert, err := conformance.Certify([]conformance.Factory{f}, conformance.Only(conformance.GroupLinearizability), conformance.ArtifactsDir(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		if cert.ChecksRun == 0 {
			t.Fatalf("run %d: the Linearizability group did not run", i)
		}
		if by := convictedBy(t, cert.Failures()); len(by) > 0 {
			caught++
			for _, r := range by {
				t.Logf("run %d (seed %d): caught by %s", i, cert.Seed, r.Name)
			}
		} else {
			t.Logf("run %d (seed %d): missed", i, cert.Seed)
		}
	}
	t.Logf("%s: caught in %d of %d runs", f.Name, caught, runs)
	return caught
}

func TestRaceCatchRateMemory(t *testing.T) {
	runs := raceRuns(t)
	racy := conformance.RacyBackends(memoryFactory())
	if len(racy) == 0 {
		t.Fatal("no planted race for memstore")
	}
	for _, f := range racy {
		if caught := catchRate(t, f, runs); caught*10 < runs*9 {
			t.Errorf("%s caught in %d of %d runs; want at least 90%%", f.Name, caught, runs)
		}
	}
}

// The planted memstore race is correct call by call: the sequential groups
// pass it, and the Linearizability group catches it (make test tries at
// most 3 times; the measured rate is TestRaceCatchRateMemory's).
func TestMemoryPlantedRaceIsCaught(t *testing.T) {
	for _, f := range conformance.RacyBackends(memoryFactory()) {
		seq, err := conformance.Certify([]conformance.Factory{f}, conformance.Only(conformance.GroupContract, conformance.GroupStateMachine), conformance.RapidChecks(50))
		if err != nil {
			t.Fatal(err)
		}
		if !seq.Passed {
			t.Fatalf("%s fails a sequential check, so it plants more than a race: %v", f.Name, seq.Failures())
		}
		requireCaught(t, f, conformance.GroupLinearizability)
	}
}

// requireCaught certifies f with only the checks named, up to 3 times, and
// fails the test unless a run fails (a race is caught by some runs only).
func requireCaught(t *testing.T, f conformance.Factory, only ...string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		cert, err := conformance.Certify([]conformance.Factory{f}, conformance.Only(only...), conformance.ArtifactsDir(t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		if by := convictedBy(t, cert.Failures()); len(by) > 0 && cert.ChecksRun > 0 {
			t.Logf("%s caught on attempt %d (seed %d) by %s", f.Name, attempt, cert.Seed, by[0].Name)
			return
		}
		if attempt == 3 {
			t.Fatalf("%s passed %v 3 times (last seed %d)", f.Name, only, cert.Seed)
		}
	}
}

// convictedBy is the failures that convict the store: every one but a
// history porcupine could not decide in time, which says only that the
// machine was slow (logged, never counted as a bug caught).
func convictedBy(t *testing.T, failures []conformance.Result) []conformance.Result {
	t.Helper()
	var out []conformance.Result
	for _, r := range failures {
		if conformance.IsUndecided(r) {
			t.Logf("%s undecided (not counted as caught): %.200s", r.Name, r.Summary)
			continue
		}
		out = append(out, r)
	}
	return out
}

// A history porcupine could not decide is a failure of the run (never a
// pass) but convicts no store: on a correct memstore, with a search budget
// no search meets, the failure is undecided and no catch is counted.
func TestUndecidedIsNoCatch(t *testing.T) {
	for try := 1; try <= 10; try++ {
		rep := conformance.Check(memoryFactory(), conformance.Only("Linearizability/PerKey"), conformance.LinearizabilityTimeout(time.Nanosecond))
		if rep.Passed() {
			continue // porcupine's search beat its own timer: try again
		}
		if len(rep.Failures()) != 1 || !conformance.IsUndecided(rep.Failures()[0]) {
			t.Fatalf("want one undecided failure:\n%s", rep)
		}
		if by := convictedBy(t, rep.Failures()); len(by) != 0 {
			t.Fatalf("an undecided history on a correct store was counted as a catch: %v", by)
		}
		return
	}
	t.Skip("porcupine decided every history within a nanosecond's budget; nothing to check")
}

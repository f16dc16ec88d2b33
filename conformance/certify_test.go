package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// A selection that runs nothing, or a backend for which nothing applies,
// certifies nothing: it must not pass.
func TestCertifyNothingRunNeverPasses(t *testing.T) {
	f := memFactory()
	f.Features = Features{} // not Concurrent: the Linearizability group skips
	cert, err := Certify([]Factory{f}, Only(GroupLinearizability), Seed(1))
	if err != nil {
		t.Fatal(err)
	}
	if cert.Passed || cert.ChecksRun != 0 || cert.ExitCode() != 1 || len(cert.Results) == 0 {
		t.Fatalf("only skipped checks: passed %v, %d run, exit %d, %d results", cert.Passed, cert.ChecksRun, cert.ExitCode(), len(cert.Results))
	}
	if rep := Check(f, Only(GroupLinearizability)); rep.Passed() {
		t.Fatalf("a report of skips alone passed:\n%s", rep)
	}
}

func TestCertifyRefusesUnknownNames(t *testing.T) {
	for _, only := range [][]string{{"Nope"}, {"Contract", "contract/AckDeletesWhoeverHoldsIt"}, {"Contract/"}} {
		_, err := Certify([]Factory{memFactory()}, Only(only...))
		if err == nil || !strings.Contains(err.Error(), "valid names: Contract, StateMachine, Linearizability, Contract/Capabilities") {
			t.Errorf("Only(%q): %v", only, err)
		}
	}
	if err := ValidateOnly(CheckNames()); err != nil {
		t.Fatal(err)
	}
}

// rapid replays every fail file under testdata/rapid/<test name>/ before
// it draws anything; a file left by an earlier run must not change what
// a later run does. With a fixed rapid seed the run is deterministic, so
// it calls New exactly as often with or without such files (a replayed
// file calls it once more).
func TestRapidFailFilesDoNotChangeARun(t *testing.T) {
	count := func() int64 {
		var n atomic.Int64
		f := Factory{Name: "memstore", New: func(t testing.TB) impl.Store {
			n.Add(1)
			s := memstore.New()
			t.Cleanup(func() { _ = s.Close() })
			return s
		}}
		rep := Check(f, Only("StateMachine/Random"), RapidChecks(5), RapidSeed(42))
		if !rep.Passed() {
			t.Fatalf("memstore failed:\n%s", rep)
		}
		return n.Load()
	}
	t.Chdir(t.TempDir())
	clean := count()
	// What rapid would glob for the names a run has had, in Check
	// ("StateMachine/Random") and under go test (this test's name).
	for _, name := range []string{"StateMachine/Random", t.Name() + "/StateMachine/Random", t.Name()} {
		safe := strings.NewReplacer("/", "_").Replace(name)
		dir := filepath.Join("testdata", "rapid", safe)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		data := "# left by an earlier run\nv0.4.8#7\n" + strings.Repeat("0x1\n", 64)
		if err := os.WriteFile(filepath.Join(dir, safe+"-20250101000000-1.fail"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if again := count(); again != clean {
		t.Fatalf("with fail files present the run opened %d stores, without %d: a fail file was replayed", again, clean)
	}
	if _, err := os.Stat(filepath.Join("testdata", "rapid", "StateMachine_Random")); err != nil {
		t.Fatal(err)
	}
}

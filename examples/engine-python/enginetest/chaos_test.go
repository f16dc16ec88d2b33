// Package enginetest certifies the example Python engine (../engine.py) the
// way an outside implementer would: it builds the deliverysim binary, runs
// `deliverysim chaos --engine-cmd 'python3 engine.py' --json` as a separate
// process and reads only its exit code and JSON report. The correct engine
// must pass; each planted variant (DSIM_PY_BUG) must fail on the invariant
// that names its bug, which shows the harness can tell them apart.
package enginetest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// report is the part of `chaos --json` a certifying user reads.
type report struct {
	Produced   int               `json:"produced"`
	Owed       int               `json:"obligations"`
	Delivered  int               `json:"delivered"`
	Lost       int               `json:"lost"`
	Kills      int               `json:"kills"`
	Invariants map[string]string `json:"invariants"`
	Violations []struct {
		Invariant string `json:"invariant"`
		Bot       string `json:"bot"`
		Event     string `json:"event"`
		Detail    string `json:"detail"`
	} `json:"violations"`
	EngineLog []string `json:"engine_log_tail"`
}

var (
	buildOnce sync.Once
	binPath   string
	binErr    error
	binDir    string
)

func TestMain(m *testing.M) {
	flag.Parse()
	// A chaos run spends its time waiting on the wall clock (20 events/s,
	// one Python engine): a handful at once use little CPU, and the default
	// -parallel (GOMAXPROCS, 2 on CI) would make this package take minutes.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "4")
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// deliverysim builds ./cmd/deliverysim once per test binary, as a user
// would (`go build`), so the test exercises the real CLI.
func deliverysim(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", "..", ".."))
		if err == nil {
			_, err = os.Stat(filepath.Join(root, "go.mod"))
		}
		if err != nil {
			binErr = fmt.Errorf("module root not found beside the test: %v", err)
			return
		}
		if binDir, binErr = os.MkdirTemp("", "pyengine-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "deliverysim")
		// go test runs with the toolchain on PATH.
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/deliverysim")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/deliverysim: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// python3 finds the interpreter. Without it the suite cannot certify the
// engine: in CI that is a failure (a skipped certification is no pass).
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 not found on PATH (CI=true): the example engine cannot be certified; install Python 3")
		}
		t.Skipf("python3 not found on PATH; install Python 3 to certify the example engine (CI=true makes this a failure)")
	}
	// A version manager's shim (pyenv) is a shell script that takes a while
	// to reach the interpreter on every restart; chaos restarts the engine
	// often, so it gets the interpreter itself.
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if exe := strings.TrimSpace(string(out)); err == nil && exe != "" {
		return exe
	}
	return p
}

// run runs `deliverysim args... --json` against the example engine with
// DSIM_PY_BUG=bug and returns its exit code, stdout and stderr.
func run(t *testing.T, bug string, args ...string) (int, []byte, string) {
	t.Helper()
	py := python3(t)
	dsn := pgtest.DSN(t)
	bin := deliverysim(t)
	engine, err := filepath.Abs(filepath.Join("..", "engine.py"))
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{}, args...), "--json", "--dsn", dsn, "--engine-cmd", py+" "+engine)
	cmd := exec.Command(bin, argv...)
	// The engine inherits this environment: its state lives in the test's
	// temp dir, gone with the test.
	cmd.Env = append(os.Environ(), "DSIM_PY_BUG="+bug, "DSIM_PY_DB="+filepath.Join(t.TempDir(), "engine.sqlite"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("deliverysim chaos did not run: %v", err)
	}
	if code == 2 {
		t.Fatalf("deliverysim chaos refused to run (exit 2): %s", errOut.String())
	}
	return code, out.Bytes(), errOut.String()
}

// chaos runs `deliverysim chaos args...` on the example engine and returns
// its exit code and report.
func chaos(t *testing.T, bug string, args ...string) (int, report, string) {
	t.Helper()
	code, out, errOut := run(t, bug, append([]string{"chaos"}, args...)...)
	var rep report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("chaos --json printed no report (%v); stderr:\n%s", err, tail(errOut, 30))
	}
	return code, rep, errOut
}

// smokeReport is `chaos --smoke --json`: one verdict per protocol step.
type smokeReport struct {
	Steps []struct {
		Step       string `json:"step"`
		OK         bool   `json:"ok"`
		Detail     string `json:"detail"`
		NotReached bool   `json:"not_reached"`
	} `json:"steps"`
}

// TestSmoke: the quick protocol check passes the engine within its 15 s
// budget, and on a wrong signature names the signing step.
func TestSmoke(t *testing.T) {
	for _, tc := range []struct {
		bug      string
		wantExit int
	}{{"", 0}, {"reserialise-signature", 1}} {
		t.Run("bug="+tc.bug, func(t *testing.T) {
			t.Parallel()
			deliverysim(t) // built before the clock starts
			start := time.Now()
			code, out, errOut := run(t, tc.bug, "chaos", "--smoke")
			took := time.Since(start)
			var rep smokeReport
			if err := json.Unmarshal(out, &rep); err != nil || len(rep.Steps) == 0 {
				t.Fatalf("chaos --smoke --json: no steps (%v); exit %d\n%s", err, code, tail(errOut, 20))
			}
			failed := map[string]string{}
			for _, st := range rep.Steps {
				if !st.OK {
					failed[st.Step] = st.Detail
				}
			}
			if code != tc.wantExit {
				t.Errorf("exit %d; want %d (failed steps: %v)", code, tc.wantExit, failed)
			}
			if tc.bug == "" && took > 20*time.Second {
				t.Errorf("the smoke check took %s; it promises at most 15 s (plus start-up)", took)
			}
			if tc.bug != "" && failed["signing"] == "" {
				t.Errorf("a wrong signature, and the signing step passed: failed steps %v", failed)
			}
			// A step the spent budget skipped says so, and is no verdict on
			// the engine: the restart used to FAIL after 5 ms and leave the
			// shutdown to SIGTERM an engine still starting.
			for _, st := range rep.Steps {
				if !st.OK && st.NotReached != strings.HasPrefix(st.Detail, "not reached") {
					t.Errorf("step %s: not_reached %v but detail %q", st.Step, st.NotReached, st.Detail)
				}
			}
			if _, bad := failed["shutdown"]; bad {
				t.Errorf("the engine exits 0 at SIGTERM, yet the shutdown step failed: %v", failed)
			}
		})
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestCorrectEnginePasses: the engine as written, SIGKILLed and facing
// database cuts and broken bots, loses nothing and breaks no invariant.
func TestCorrectEnginePasses(t *testing.T) {
	t.Parallel()
	code, rep, errOut := chaos(t, "", "--seed", "25", "--duration", "20s", "--kills", "4", "--settle", "30s")
	if code != 0 || rep.Lost != 0 {
		t.Errorf("exit %d, lost %d of %d; want exit 0 and nothing lost", code, rep.Lost, rep.Owed)
		for inv, verdict := range rep.Invariants {
			if verdict == "FAIL" {
				t.Errorf("invariant %s FAIL", inv)
			}
		}
		for i, v := range rep.Violations {
			if i == 10 {
				t.Errorf("... %d violations in all", len(rep.Violations))
				break
			}
			t.Errorf("violation %s: bot %q event %q: %s", v.Invariant, v.Bot, v.Event, v.Detail)
		}
		t.Logf("chaos stderr:\n%s\nengine log tail:\n%s", tail(errOut, 20), strings.Join(rep.EngineLog, "\n"))
	}
	if rep.Produced == 0 || rep.Delivered == 0 || rep.Kills == 0 {
		t.Errorf("produced %d, delivered %d, kills %d: the run did not exercise the engine", rep.Produced, rep.Delivered, rep.Kills)
	}
	// A pass must be a judgement: the engine serves the observation endpoint,
	// so none of these may come back "not judged".
	for _, inv := range []string{"no-silent-loss", "no-phantom-delivery", "idempotent-replay", "bounded-retry",
		"dead-letter-earned", "liveness", "signed-requests", "cursor-progress", "key-held", "clean-shutdown"} {
		if rep.Invariants[inv] != "PASS" {
			t.Errorf("invariant %s: %q; want PASS (judged)", inv, rep.Invariants[inv])
		}
	}
}

// TestPlantedBugsFail: each variant is a bug a real engine could ship, and
// chaos must exit 1 naming the invariant that describes it.
func TestPlantedBugsFail(t *testing.T) {
	noDB := []string{"--db-cuts", "0"}
	variants := []struct {
		bug, invariant, why string
		extra               []string
		// long: a 20 s run, not 15 s; a restart after long downtime comes
		// only in a run that long (chaos fits it in 2/5 of the fault phase).
		long bool
	}{
		{"cursor-before-queue", "no-silent-loss", "the cursor moves before the batch's rows are durable; a kill loses them", nil, false},
		{"no-retry", "no-silent-loss", "a failed attempt is given up as if delivered", nil, false},
		{"reserialise-signature", "signed-requests", "the signature covers re-serialised JSON, not the bytes sent", nil, false},
		{"resume-from-head", "no-silent-loss", "a restart subscribes from=head, skipping what was produced while down", nil, false},
		{"ignore-leave", "no-phantom-delivery", "a membership entry with member:false is read as a join", nil, false},
		{"ignore-key", "key-held", "a bot's events are sent before the registry shows its key", nil, false},
		// chaos excuses what happens near a database fault whether or not
		// the engine uses the database: each fault excuses a failure of a
		// message from max attempts, and a rotated-out secret stays
		// accepted until 5 s after the last one. With the default cuts
		// (about one per 5 s) a 15 s run never drops bot-1's old secret
		// and can excuse a 9th send. This engine keeps nothing in
		// Postgres, so these two run without database faults.
		{"retry-forever", "bounded-retry", "a message is never dead-lettered (the workload's permanent 4xx exposes it)", noDB, false},
		{"stale-secret", "signed-requests", "the first secret seen is used for ever (the workload rotates one)", noDB, false},
		// Issue 37's miss classes beside reserialise-signature and
		// cursor-before-queue above. Each needs a workload that reaches
		// its rule (a bot answering 410; a restart after more than 5 s
		// down; a message failing max attempts on transient errors), so
		// on a workload without it the variant passes and this fails.
		{"retry-gone", "bounded-retry", "a 410 Gone is retried for ever, never counted against max attempts", noDB, false},
		{"head-if-stale", "no-silent-loss", "a restart whose durable cursor is more than 5 s old subscribes from=head", nil, true},
		{"dead-early", "dead-letter-earned", "a message is dead-lettered after max attempts - 1 failures", noDB, false},
		// The rules judged with the declared settings (PROTOCOL.md).
		{"no-backoff", "retry-backoff", "a failed attempt is retried at once", nil, false},
		{"ignore-in-flight-limit", "in-flight-limit", "8 requests per bot in flight, whatever is declared (1 here)", []string{"--max-in-flight-per-bot", "1"}, false},
		{"overcount-acked", "reported-counters", "/metrics counts each 2xx twice", nil, false},
		{"resume-from-start", "resume-from-cursor", "a restart reads each stream from its start, not from its cursor", nil, false},
		// requeue-replays (a replayed event queued again, its attempts
		// starting over) is not here: it shows only when a dead-lettered
		// event happens to be replayed, which not every run does
		// (README.md, "Planted bugs").
	}
	for _, v := range variants {
		t.Run(v.bug, func(t *testing.T) {
			t.Parallel()
			duration := "15s"
			if v.long {
				duration = "20s"
			}
			args := append([]string{"--seed", "25", "--duration", duration, "--kills", "3", "--settle", "5s"}, v.extra...)
			code, rep, errOut := chaos(t, v.bug, args...)
			named := false
			for _, viol := range rep.Violations {
				named = named || viol.Invariant == v.invariant
			}
			if code != 1 || !named {
				t.Errorf("DSIM_PY_BUG=%s (%s): exit %d, %s %q; want exit 1 and a %s violation (violations: %d, invariants %v)\n%s",
					v.bug, v.why, code, v.invariant, rep.Invariants[v.invariant], v.invariant, len(rep.Violations), rep.Invariants, tail(errOut, 10))
			}
			// A variant that never delivered anything fails for being broken,
			// not for its bug.
			if rep.Delivered == 0 && v.invariant != "signed-requests" {
				t.Errorf("DSIM_PY_BUG=%s delivered nothing of %d: the engine did not work at all", v.bug, rep.Owed)
			}
		})
	}
}

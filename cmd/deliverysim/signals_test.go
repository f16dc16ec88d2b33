package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/internal/pgschema"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Issue 28: every command stops within seconds of SIGINT or SIGTERM, exits
// 130 (serve: 0, as a service), prints what --json had so far, and leaves
// no schema, process or temporary folder behind. The signals go to the
// built binary, as a user's Ctrl-C or a CI runner's SIGTERM would.
//
// DELIVERYSIM_SIGNAL_BIN points the test at another build (the one before
// a fix, to see it fail).

// signalBudget is how long a command may take to exit after the signal.
const signalBudget = 5 * time.Second

// builtCLI builds deliverysim into a folder of the test's.
func builtCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DELIVERYSIM_SIGNAL_BIN"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "deliverysim")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// sigCase is one command to interrupt.
type sigCase struct {
	name string
	args []string
	env  []string
	dir  string // working directory (default: the test's)
	// ready tells, from stderr so far, that the command is in the middle
	// of its work; settle is waited after that.
	ready  func(stderr string) bool
	settle time.Duration
	// busy, if set, tells the same from the process itself (its pid):
	// for a command that prints nothing while it works.
	busy func(pid int) bool
	// budget bounds the exit after the signal (signalBudget unless set).
	budget time.Duration
	// wantExit is the status after the signal (130 unless said).
	wantExit int
	// json: stdout must be one JSON object with "interrupted": true.
	json bool
	// stage, if set, is the "stage" the JSON must report.
	stage string
	// check looks for leftovers once the process is gone (pid was its).
	check func(t *testing.T, pid int, tmp string)
	// report, if set, judges what the command printed on stdout.
	report func(t *testing.T, stdout string)
}

// signalled is what one interrupted invocation did.
type signalled struct {
	exit    int
	took    time.Duration
	stdout  string
	stderr  string
	pid     int
	tmp     string
	leftPid []int
}

// lockedWriter collects a child's stderr while the test polls it.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// interrupt starts bin with c's arguments, waits until it is busy, sends
// sig and returns what happened. The process and everything it started
// carry a marker in their environment, so processes left behind are found
// whatever process group they moved to.
func interrupt(t *testing.T, bin string, c sigCase, sig syscall.Signal) signalled {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	var mark [8]byte
	_, _ = rand.Read(mark[:])
	marker := "DELIVERYSIM_SIGNAL_TEST=" + hex.EncodeToString(mark[:])
	cmd := exec.Command(bin, c.args...)
	cmd.Dir = c.dir
	cmd.Env = append(append(os.Environ(), "TMPDIR="+tmp, marker), c.env...)
	var out bytes.Buffer
	errb := &lockedWriter{}
	cmd.Stdout, cmd.Stderr = &out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(3 * time.Minute)
	ready := c.ready
	if c.busy != nil {
		ready = func(string) bool { return c.busy(cmd.Process.Pid) }
	}
	for ready != nil && !ready(errb.String()) {
		select {
		case err := <-done:
			t.Fatalf("%s ended (%v) before it was busy; stderr:\n%s", c.name, err, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("%s never got busy; stderr:\n%s", c.name, errb.String())
		}
	}
	select {
	case err := <-done:
		t.Fatalf("%s ended (%v) before the signal; stderr:\n%s", c.name, err, errb.String())
	case <-time.After(c.settle):
	}
	sent := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running 2 minutes after %v; stderr:\n%s", c.name, sig, errb.String())
	}
	s := signalled{took: time.Since(sent), stdout: out.String(), stderr: errb.String(), pid: cmd.Process.Pid, tmp: tmp}
	s.exit = cmd.ProcessState.ExitCode()
	if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
		s.exit = -1 // killed by a signal: no status of its own
	}
	// Children get a moment to finish dying before they count as left.
	for i := 0; i < 20; i++ {
		if s.leftPid = processesWith(marker); len(s.leftPid) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range s.leftPid {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return s
}

// processesWith lists the processes whose environment holds marker.
func processesWith(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == marker {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// emptyDir fails unless dir has nothing in it.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("left in its temporary folder: %v", names)
	}
}

// schemasOfPid lists the project schemas that process pid created.
func schemasOfPid(t *testing.T, dsn string, pid int) []string {
	var mine []string
	for _, s := range schemasLike(t, dsn, pgschema.Prefix) {
		if parts := strings.Split(s, "_"); len(parts) > 3 && parts[3] == fmt.Sprint(pid) {
			mine = append(mine, s)
		}
	}
	return mine
}

// runSchemasOfPid lists the run schemas (run, sweep, chaos) that process
// pid created.
func runSchemasOfPid(t *testing.T, dsn string, pid int) []string {
	var runs []string
	for _, s := range schemasOfPid(t, dsn, pid) {
		if kind, _, ok := pgschema.Parse(s); ok && kind == pgschema.KindRun {
			runs = append(runs, s)
		}
	}
	return runs
}

func hasLine(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}

// blackHole listens on 127.0.0.1 and accepts connections it never
// answers: a server that is up and hung.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// longScenario is a legal scenario whose run takes minutes: 100000 events
// to two bots.
func longScenario(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "long.yaml")
	doc := `name: long
title: a long legal run
topology:
  streams:
    - {name: channel-1}
  bots:
    - {id: bot-1}
    - {id: bot-2}
  members:
    - {stream: channel-1, bot: bot-1}
    - {stream: channel-1, bot: bot-2}
workload:
  events:
    - {stream: channel-1, at: 0s, count: 100000, every: 10ms}
`
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSignalsStopEveryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs every command: not in -short")
	}
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find processes left behind")
	}
	bin := builtCLI(t)
	long := longScenario(t)
	hole := blackHole(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	minDir := t.TempDir()
	cases := []sigCase{
		{name: "run", args: []string{"run", "--scenario", long, "--json"}, settle: time.Second, json: true},
		{name: "run-minimizing", args: []string{"run", "--seed", "11", "--bugs", "delete-before-send", "--json", "--min-dir", minDir},
			ready: func(string) bool {
				ents, _ := os.ReadDir(minDir)
				return len(ents) > 0
				// The minimizer made its directory: it is at work. No settle:
				// seed 11's minimization can end within 200 ms (CI, dadeee4).
			}, settle: time.Millisecond, json: true,
			check: func(t *testing.T, _ int, _ string) { emptyDir(t, minDir) }, stage: "minimizing"},
		{name: "trace", args: []string{"trace", "--scenario", long, "--out", filepath.Join(t.TempDir(), "trace.txt")}, settle: time.Second,
			check: func(t *testing.T, _ int, _ string) {}},
		{name: "sweep", args: []string{"sweep", "--seeds", "1-100000", "--json", "--parallel", "2"}, ready: hasLine("sweep progress"), json: true},
		{name: "bench-replay", args: []string{"bench", "replay", "--events", "10000000", "--json"}, ready: hasLine("filling the store"), settle: time.Second, json: true},
		{name: "serve", args: []string{"serve", "--upstream", "http://" + hole, "--registry", "http://" + hole, "--listen", "127.0.0.1:0"},
			ready: hasLine("serving metrics"), settle: 300 * time.Millisecond, wantExit: 0},
		{name: "gc", args: []string{"gc", "--dsn", "postgres://postgres@" + hole + "/postgres?sslmode=disable", "--json"}, settle: time.Second, json: true},
		{name: "mutate", dir: root, args: []string{"mutate", "--pkg", "impl/receiver", "--seeds", "3", "--pool", "0", "--json"},
			ready: hasLine("mutants in impl/receiver"), settle: 500 * time.Millisecond, json: true},
	}
	runSignalCases(t, bin, cases)
}

// The same on PostgreSQL: the runs' schemas go too.
func TestSignalsStopPostgresCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not in -short")
	}
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find processes left behind")
	}
	dsn := pgtest.DSN(t)
	bin := builtCLI(t)
	long := longScenario(t)
	pgLeft := func(t *testing.T, pid int, _ string) {
		if left := schemasOfPid(t, dsn, pid); len(left) > 0 {
			t.Errorf("schemas left behind: %v", left)
		}
	}
	runSignalCases(t, bin, []sigCase{
		{name: "sweep-postgres", args: []string{"sweep", "--seeds", "1-100000", "--backend", "postgres", "--dsn", dsn, "--json", "--parallel", "2"},
			ready: hasLine("sweep progress"), json: true, check: pgLeft},
		{name: "run-postgres", args: []string{"run", "--scenario", long, "--backend", "postgres", "--dsn", dsn, "--json"},
			settle: 2 * time.Second, json: true, check: pgLeft},
		{name: "bench-replay-postgres", args: []string{"bench", "replay", "--backend", "postgres", "--dsn", dsn, "--events", "400000", "--json"},
			ready: hasLine("filling the store"), settle: 2 * time.Second, json: true, check: pgLeft},
	})
}

func runSignalCases(t *testing.T, bin string, cases []sigCase) {
	for _, c := range cases {
		if c.wantExit == 0 && c.name != "serve" {
			c.wantExit = exitInterrupted
		}
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			t.Run(c.name+"/"+sig.String(), func(t *testing.T) {
				s := interrupt(t, bin, c, sig)
				t.Logf("%s %v: exit %d after %v, stdout %d bytes", c.name, sig, s.exit, s.took.Round(time.Millisecond), len(s.stdout))
				if s.exit != c.wantExit {
					t.Errorf("exit %d after %v; want %d\nstderr:\n%s", s.exit, sig, c.wantExit, tail(s.stderr, 10))
				}
				budget := signalBudget
				if c.budget > 0 {
					budget = c.budget
				}
				if s.took > budget {
					t.Errorf("took %v to exit after %v; want at most %v", s.took, sig, budget)
				}
				if c.json {
					var v struct {
						Version     *int `json:"schema_version"`
						Interrupted bool `json:"interrupted"`
					}
					if err := json.Unmarshal([]byte(s.stdout), &v); err != nil || v.Version == nil || !v.Interrupted {
						t.Errorf("stdout is not a JSON object marked interrupted (%v): %q", err, firstLine(s.stdout))
					}
					if c.stage != "" && !strings.Contains(s.stdout, `"stage": "`+c.stage+`"`) {
						t.Errorf("not stopped while %s: %s", c.stage, tail(s.stdout, 5))
					}
				}
				if len(s.leftPid) > 0 {
					t.Errorf("processes left running: %v", s.leftPid)
				}
				emptyDir(t, s.tmp)
				if c.check != nil {
					c.check(t, s.pid, s.tmp)
				}
				if c.report != nil {
					c.report(t, s.stdout)
				}
			})
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func firstLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	if sc.Scan() {
		return sc.Text()
	}
	return ""
}

// Issue 28: gc against a server that accepts connections and never
// answers hung for ever; now it gives up after pgschema.ConnectTimeout
// with one line and exit 2.
func TestGCAgainstBlackHoledServerIsBounded(t *testing.T) {
	hole := blackHole(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var outb, errb bytes.Buffer
	code := run(ctx, []string{"gc", "--dsn", "postgres://postgres@" + hole + "/postgres?sslmode=disable"}, &outb, &errb, func(string) string { return "" })
	out, errS := outb.String(), errb.String()
	took := time.Since(start)
	if code != 2 || out != "" || strings.Count(errS, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line", code, out, errS)
	}
	if took > pgschema.ConnectTimeout+5*time.Second {
		t.Errorf("gc took %v against a black-holed server; want about %v", took, pgschema.ConnectTimeout)
	}
}

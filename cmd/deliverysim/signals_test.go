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

// signalTarget is how soon a command should exit after the signal. The
// time taken is logged against it, not judged: on a shared, loaded runner
// it says how busy the machine was as much as how the command behaves.
// What is judged: the exit status, the partial report, nothing left behind,
// and an exit at all (signalFailSafe, a hang detector).
const (
	signalTarget   = 5 * time.Second
	signalFailSafe = 2 * time.Minute
)

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
	// of its work; the signal goes as soon as it does (no settle time: a
	// command whose work could end before the signal is given more work or
	// held, never a sleep).
	ready func(stderr string) bool
	// busy, if set, tells the same from the process itself (its pid):
	// for a command that prints nothing while it works.
	busy func(pid int) bool
	// budget, if set, is a bound the exit after the signal must keep; a
	// generous one (a hang detector, under signalFailSafe). Unset, the time
	// is only logged against signalTarget.
	budget time.Duration
	// setup, if set, prepares each invocation (a fresh black hole to
	// watch, say) by changing its copy of the case.
	setup func(t *testing.T, c *sigCase)
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
	deadline := time.Now().Add(3 * time.Minute) // a hang detector only
	ready := c.ready
	if c.busy != nil {
		ready = func(string) bool { return c.busy(cmd.Process.Pid) }
	}
	if ready == nil {
		t.Fatalf("%s: no ready or busy signal; a test must not guess when a command is at work", c.name)
	}
	for !ready(errb.String()) {
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
	sent := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(signalFailSafe):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s still running %v after %v; stderr:\n%s", c.name, signalFailSafe, sig, errb.String())
	}
	s := signalled{took: time.Since(sent), stdout: out.String(), stderr: errb.String(), pid: cmd.Process.Pid, tmp: tmp}
	s.exit = cmd.ProcessState.ExitCode()
	if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
		s.exit = -1 // killed by a signal: no status of its own
	}
	// Judged the moment it has exited, with no grace to guess: a process
	// of its that is dying (a zombie, exiting, or with SIGKILL pending)
	// is not left; one that is not dying is left, however soon it would
	// have ended on its own.
	s.leftPid = processesWith(marker)
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
				if !dying(pid) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// dying tells that process pid is on its way out: a zombie, exiting
// (PF_EXITING in its flags), or with SIGKILL pending. Gone counts as dying.
func dying(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 7 || f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return true
	}
	var flags uint64
	if _, err := fmt.Sscan(f[6], &flags); err == nil && flags&0x4 != 0 { // PF_EXITING, proc(5) field 9
		return true
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		var mask uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
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
	addr, _ := watchedBlackHole(t)
	return addr
}

// watchedBlackHole is blackHole that also tells how many connections it
// accepted (a client is then waiting on it).
func watchedBlackHole(t *testing.T) (string, func() int) {
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
	accepted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
	return ln.Addr().String(), accepted
}

// cpuBusy tells that process pid has spent at least d of CPU time: past
// its start-up, in the work it was given (an amount of work, not of wall
// time, so the machine's load does not change when it holds).
func cpuBusy(d time.Duration) func(pid int) bool {
	return func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return false
		}
		var utime, stime int64
		fmt.Sscan(f[11], &utime) // fields 14 and 15 of proc(5), in ticks
		fmt.Sscan(f[12], &stime)
		return time.Duration(utime+stime)*(time.Second/100) >= d // USER_HZ is 100 on Linux
	}
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
		// 100000 events are about 16 s of CPU; the signal goes after 0.2 s of it.
		{name: "run", args: []string{"run", "--scenario", long, "--json"}, busy: cpuBusy(200 * time.Millisecond), json: true},
		// Seed 11's minimization can end within 200 ms (CI, dadeee4): the
		// process holds it (the test hook) until the signal comes.
		{name: "run-minimizing", args: []string{"run", "--seed", "11", "--bugs", "delete-before-send", "--json", "--min-dir", minDir},
			env: []string{holdMinimizingEnv + "=1"}, ready: hasLine("minimizing, held until a signal"), json: true,
			check: func(t *testing.T, _ int, _ string) { emptyDir(t, minDir) }, stage: "minimizing"},
		{name: "trace", args: []string{"trace", "--scenario", long, "--out", filepath.Join(t.TempDir(), "trace.txt")}, busy: cpuBusy(200 * time.Millisecond),
			check: func(t *testing.T, _ int, _ string) {}},
		{name: "sweep", args: []string{"sweep", "--seeds", "1-100000", "--json", "--parallel", "2"}, ready: hasLine("sweep progress"), json: true},
		{name: "bench-replay", args: []string{"bench", "replay", "--events", "10000000", "--json"}, ready: hasLine("filling the store"), json: true},
		{name: "serve", args: []string{"serve", "--upstream", "http://" + hole, "--registry", "http://" + hole, "--listen", "127.0.0.1:0"},
			ready: hasLine("serving metrics"), wantExit: 0},
		// gc is at work once it waits on the black hole's answer.
		{name: "gc", json: true, setup: func(t *testing.T, c *sigCase) {
			hole, accepted := watchedBlackHole(t)
			c.args = []string{"gc", "--dsn", "postgres://postgres@" + hole + "/postgres?sslmode=disable", "--json"}
			c.ready = func(string) bool { return accepted() > 0 }
		}},
		{name: "mutate", dir: root, args: []string{"mutate", "--pkg", "impl/receiver", "--seeds", "3", "--pool", "0", "--json"},
			ready: hasLine("mutants in impl/receiver"), json: true},
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
		// At work once its run schema exists.
		{name: "run-postgres", args: []string{"run", "--scenario", long, "--backend", "postgres", "--dsn", dsn, "--json"},
			json: true, check: pgLeft, setup: func(t *testing.T, c *sigCase) {
				c.busy = func(pid int) bool { return len(runSchemasOfPid(t, dsn, pid)) > 0 }
			}},
		{name: "bench-replay-postgres", args: []string{"bench", "replay", "--backend", "postgres", "--dsn", dsn, "--events", "400000", "--json"},
			ready: hasLine("filling the store"), json: true, check: pgLeft},
	})
}

func runSignalCases(t *testing.T, bin string, cases []sigCase) {
	for _, c := range cases {
		if c.wantExit == 0 && c.name != "serve" {
			c.wantExit = exitInterrupted
		}
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			t.Run(c.name+"/"+sig.String(), func(t *testing.T) {
				c := c
				if c.setup != nil {
					c.setup(t, &c)
				}
				s := interrupt(t, bin, c, sig)
				over := ""
				if s.took > signalTarget {
					over = fmt.Sprintf(" (over the %v target: logged, not judged)", signalTarget)
				}
				t.Logf("%s %v: exit %d after %v%s, stdout %d bytes", c.name, sig, s.exit, s.took.Round(time.Millisecond), over, len(s.stdout))
				if s.exit != c.wantExit {
					t.Errorf("exit %d after %v; want %d\nstderr:\n%s", s.exit, sig, c.wantExit, tail(s.stderr, 10))
				}
				if c.budget > 0 && s.took > c.budget {
					t.Errorf("took %v to exit after %v; the hang detector's bound is %v", s.took, sig, c.budget)
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
// The time it took is logged against ConnectTimeout; what is judged is
// that it gives up on its own (no context bounds it here: a hang runs into
// the 3 minute hang detector) with exit 2 and one line.
func TestGCAgainstBlackHoledServerIsBounded(t *testing.T) {
	hole := blackHole(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var outb, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"gc", "--dsn", "postgres://postgres@" + hole + "/postgres?sslmode=disable"}, &outb, &errb, func(string) string { return "" })
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(3 * time.Minute):
		cancel()
		<-done
		t.Fatalf("gc still waiting on a black-holed server after 3 minutes (ConnectTimeout is %v)", pgschema.ConnectTimeout)
	}
	took := time.Since(start)
	t.Logf("gc gave up after %v (ConnectTimeout %v)", took.Round(time.Millisecond), pgschema.ConnectTimeout)
	out, errS := outb.String(), errb.String()
	if code != 2 || out != "" || strings.Count(errS, "\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line", code, out, errS)
	}
}

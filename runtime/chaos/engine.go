package chaos

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// engineProc is the engine under test as a child process. It runs in a
// process group of its own (a kill reaches anything it started) and dies
// with the harness (Pdeathsig), so nothing outlives a run.
type engineProc struct {
	argv []string
	env  []string
	log  *os.File

	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit of the last incarnation
	inc  int
	from int64 // where the current incarnation's output starts in log
	// pgid is the running incarnation's process group (0: none), for
	// signal: an aimed kill is sent from the goroutine that saw its moment,
	// without waiting for the fault phase's loop.
	pgid atomic.Int64
}

// signal SIGKILLs the running incarnation's process group at once, from
// any goroutine; the fault phase reaps it (kill) afterwards.
func (p *engineProc) signal() bool {
	pid := p.pgid.Load()
	return pid > 0 && syscall.Kill(-int(pid), syscall.SIGKILL) == nil
}

func (p *engineProc) start() error {
	p.inc++
	args := append(append([]string(nil), p.argv[1:]...), "--node", fmt.Sprintf("engine-%d", p.inc))
	cmd := exec.Command(p.argv[0], args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(p.log, "--- chaos: starting incarnation %d at %s\n", p.inc, time.Now().UTC().Format(time.RFC3339Nano))
	p.from, _ = p.log.Seek(0, io.SeekCurrent)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start engine %q: %w", p.argv[0], err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	p.pgid.Store(int64(cmd.Process.Pid))
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		close(done)
	}(p.done)
	return nil
}

// exitDetail says how the last incarnation ended, with the last lines it
// wrote: an engine that dies at once (a bad flag, a database it cannot
// reach) must say why in the report, not only in a log nobody reads.
func (p *engineProc) exitDetail() string {
	msg := fmt.Sprintf("incarnation %d: %v", p.inc, p.err)
	const most = 4 << 10
	end, err := p.log.Seek(0, io.SeekCurrent)
	if err != nil || end <= p.from {
		return msg + " (it wrote nothing)"
	}
	from := p.from
	if end-from > most {
		from = end - most
	}
	b := make([]byte, end-from)
	if _, err := p.log.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return msg
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 2 {
		lines = lines[len(lines)-2:]
	}
	return msg + "; its last output: " + strings.Join(lines, " | ")
}

func (p *engineProc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the process group and reaps the process.
func (p *engineProc) kill() {
	if p.cmd == nil {
		return
	}
	p.pgid.Store(0)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// term sends SIGTERM and waits up to grace for a clean exit, then kills.
// It returns the exit error (nil for status 0) and whether it had to kill.
func (p *engineProc) term(grace time.Duration) (error, bool) {
	if p.cmd == nil {
		return errors.New("the engine was not running"), false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		p.pgid.Store(0)
		p.cmd = nil
		return p.err, false
	case <-t.C:
		p.kill()
		return fmt.Errorf("no exit within %s of SIGTERM", grace), true
	}
}

// StateDirEnv names the directory an engine that keeps its state in
// files (not in the Postgres schema it is given) may use: the same for
// every incarnation of one run, removed with the run (PROTOCOL.md).
const StateDirEnv = "DELIVERYSIM_STATE_DIR"

// stateEnv makes the run's state directory under dir and adds it to env.
func stateEnv(dir string, env []string) ([]string, error) {
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, err
	}
	return append(append([]string(nil), env...), StateDirEnv+"="+state), nil
}

//go:build unix

package mutate

import (
	"os/exec"
	"syscall"
	"time"
)

// ownGroup starts cmd in a process group of its own and makes its
// cancellation interrupt the whole group, as Ctrl-C in a terminal would:
// go build then stops its compilers and removes its work folder. A group
// still there a few seconds later is killed.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		err := syscall.Kill(-pgid, syscall.SIGINT)
		time.AfterFunc(3*time.Second, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		return err
	}
}

// inGroup starts cmd in a process group of its own, which killTree kills
// and reapGroup reaps: whatever the process starts goes with it.
func inGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killTree kills a started cmd: its whole process group if inGroup put
// it in one, else the process.
func killTree(cmd *exec.Cmd) {
	if !killGroup(cmd) {
		_ = cmd.Process.Kill()
	}
}

// reapGroup kills what is left of an ended cmd's process group (children
// it left behind); the group's id stays reserved while any member lives.
func reapGroup(cmd *exec.Cmd) { killGroup(cmd) }

// killGroup kills cmd's process group, if inGroup gave it one.
func killGroup(cmd *exec.Cmd) bool {
	if cmd.Process == nil || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		return false
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return true
}

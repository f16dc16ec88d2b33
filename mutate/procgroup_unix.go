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

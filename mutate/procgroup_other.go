//go:build !unix

package mutate

import "os/exec"

// ownGroup: without process groups, cancellation kills cmd alone.
func ownGroup(*exec.Cmd) {}

// inGroup: without process groups, cmd is killed alone.
func inGroup(*exec.Cmd) {}

func killTree(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

func reapGroup(*exec.Cmd) {}

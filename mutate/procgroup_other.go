//go:build !unix

package mutate

import "os/exec"

// ownGroup: without process groups, cancellation kills cmd alone.
func ownGroup(*exec.Cmd) {}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 38: README promises that `make test` starts with one line saying
// which PostgreSQL its tests use, but `go vet` ran (and was echoed) first.
// make runs the real Makefile here with GO pointing at a stand-in: `go
// run ./cmd/deliverysim pgwhich ...` runs the built binary's pgwhich, and
// every other go command only says what it was asked.
func TestMakeTestStartsWithThePostgresLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not in -short")
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	bin := builtCLI(t)
	goStub := filepath.Join(t.TempDir(), "go")
	script := `#!/bin/sh
if [ "$1" = run ] && [ "$2" = ./cmd/deliverysim ]; then shift 2; exec "` + bin + `" "$@"; fi
echo "stub go $*"
`
	if err := os.WriteFile(goStub, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mk, "--no-print-directory", "-C", "../..", "test", "GO="+goStub)
	// An unreachable DSN: pgwhich answers at once and says so, and no
	// server's state matters.
	cmd.Env = append(os.Environ(), "DELIVERYSIM_PG_DSN=postgres://nobody@127.0.0.1:1/none")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make test: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !strings.HasPrefix(lines[0], "make test: DELIVERYSIM_PG_DSN=") {
		t.Errorf("make test begins with %q; want the PostgreSQL line\n%s", lines[0], out)
	}
	if !strings.Contains(string(out), "stub go vet ./...") {
		t.Errorf("make test no longer runs go vet:\n%s", out)
	}
}

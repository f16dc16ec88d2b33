package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// Issue 38's small defects, each found by a newcomer with the built
// binary and each checked with it here.
func TestNewcomerDefects(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: not in -short")
	}
	bin := builtCLI(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// oneLine checks a refusal: exit 2, nothing on stdout, one line on
	// stderr holding want.
	oneLine := func(t *testing.T, code int, out, errS, want string) {
		t.Helper()
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errS), "\n") != 0 || !strings.Contains(errS, want) {
			t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", code, out, errS, want)
		}
	}

	// The "run one" line said `go run ./cmd/deliverysim` wherever the
	// binary ran; outside a checkout only the installed binary works.
	t.Run("ScenariosRunOneLine", func(t *testing.T) {
		for _, c := range []struct{ dir, want string }{
			{t.TempDir(), "run one: deliverysim run --scenario NAME"},
			{root, "run one: go run ./cmd/deliverysim run --scenario NAME"},
		} {
			code, out, errS := runBinaryIn(t, c.dir, nil, bin, "scenarios")
			if code != 0 || !strings.Contains(out, "\n"+c.want) {
				t.Errorf("in %s: exit %d; want a line %q\n%s%s", c.dir, code, c.want, tail(out, 3), errS)
			}
		}
	})

	// A minimized scenario's "# Replay:" header said `go run
	// ./cmd/deliverysim` outside a checkout, and named a file that did
	// not exist: a relative --min-dir (from another folder), or sweep
	// --artifacts, which renamed the file to minimized.yaml after writing
	// its header.
	t.Run("MinimizedReplayHeader", func(t *testing.T) {
		cwd := t.TempDir()
		code, out, errS := runBinaryIn(t, cwd, nil, bin, "run", "--seed", "1", "--bugs", "delete-before-send", "--min-dir", "min")
		if code != 1 {
			t.Fatalf("exit %d; want 1\n%s", code, errS)
		}
		replayed := func(t *testing.T, file string) {
			t.Helper()
			replay := headerLine(t, file, "# Replay: ")
			want := "deliverysim run --scenario " + file
			if replay != want {
				t.Fatalf("# Replay: %q; want %q", replay, want)
			}
			// Run it as printed, from another folder.
			args := strings.Fields(replay)[1:]
			if code, _, errS := runBinary(t, nil, bin, args...); code != 1 {
				t.Errorf("the replay exits %d; want 1 (it fails the same way)\n%s", code, errS)
			}
		}
		var file string
		for _, l := range strings.Split(out, "\n") {
			if p, ok := strings.CutPrefix(l, "minimized: "); ok {
				file = p
			}
		}
		if !filepath.IsAbs(file) || !strings.HasPrefix(file, filepath.Join(cwd, "min")) {
			t.Fatalf("minimized: %q; want an absolute path under %s", file, filepath.Join(cwd, "min"))
		}
		replayed(t, file)

		art := filepath.Join(t.TempDir(), "art")
		if code, _, errS := runBinary(t, nil, bin, "sweep", "--seeds", "1-1", "--bugs", "delete-before-send", "--artifacts", art); code != 1 {
			t.Fatalf("sweep: exit %d; want 1\n%s", code, errS)
		}
		replayed(t, filepath.Join(art, "seed-1", "minimized.yaml"))
	})

	// Minimization runs on memory; a Postgres run's minimized scenario
	// replayed there without a word.
	t.Run("PostgresMinimizedSaysMemory", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		code, out, errS := runBinary(t, nil, bin, "run", "--seed", "1", "--bugs", "delete-before-send", "--backend", "postgres", "--dsn", dsn, "--min-dir", t.TempDir())
		if code != 1 {
			t.Fatalf("exit %d; want 1\n%s", code, errS)
		}
		const says = "minimized on the in-memory store (the run was on postgres)"
		if !strings.Contains(out, "note: "+says) {
			t.Errorf("the run's output does not say where the scenario replays:\n%s", tail(out, 6))
		}
		var file string
		for _, l := range strings.Split(out, "\n") {
			if p, ok := strings.CutPrefix(l, "minimized: "); ok {
				file = p
			}
		}
		if note := headerLine(t, file, "# Note: "); !strings.HasPrefix(note, says) {
			t.Errorf("# Note: %q; want it to start %q", note, says)
		}
	})

	// `run --seed 1 --seed 2` ran seed 2 and said nothing.
	t.Run("RepeatedFlagRefused", func(t *testing.T) {
		code, out, errS := runBinary(t, nil, bin, "run", "--seed", "1", "--seed", "2")
		oneLine(t, code, out, errS, "--seed given more than once")
	})

	// A 0755 directory was reported as "d---------".
	t.Run("ScenarioDirectoryNamed", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		code, out, errS := runBinary(t, nil, bin, "run", "--scenario", dir)
		oneLine(t, code, out, errS, "not a regular file (a directory, drwxr-xr-x)")
	})

	// An engine whose file is missing ended the smoke check with "FAIL
	// start" and "smoke check took " with no duration, exit 1: nothing
	// of the protocol was checked, so the command could not run as asked.
	t.Run("SmokeEngineFileMissing", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		sh, err := exec.LookPath("sh")
		if err != nil {
			t.Skip("no sh")
		}
		missing := filepath.Join(t.TempDir(), "engine.sh")
		for _, extra := range [][]string{nil, {"--json"}} {
			args := append([]string{"chaos", "--smoke", "--dsn", dsn, "--engine-cmd", sh + " " + missing}, extra...)
			code, out, errS := runBinary(t, nil, bin, args...)
			oneLine(t, code, out, errS, "the engine exited before the upstream served it anything")
			if !strings.Contains(errS, missing) {
				t.Errorf("stderr does not name the missing file: %s", errS)
			}
		}
	})
}

// headerLine returns the rest of the first line of file's comment header
// that starts with prefix; the file must exist.
func headerLine(t *testing.T, file, prefix string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("the minimized scenario: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			break
		}
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return rest
		}
	}
	t.Fatalf("%s has no %q line in its header", file, prefix)
	return ""
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunHTMLReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.html")
	code, _, _ := cli(t, nil, "run", "--seed", "1", "--bugs", "delete-before-send", "--no-minimize", "--html", path)
	require.Equal(t, 1, code, "seed 1 with delete-before-send fails")
	page, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(page), `id="violations"`)
	assert.Contains(t, string(page), "no-silent-loss")
	assert.Contains(t, string(page), "--bugs delete-before-send", "the reproduce line")

}

// A report into a directory that does not exist is refused before the run:
// a failing seed would otherwise have been run and minimized (into minDir)
// first, and only then refused.
func TestRunHTMLMissingDirectoryFailsBeforeTheRun(t *testing.T) {
	minDir := t.TempDir()
	missing := filepath.Join(t.TempDir(), "missing")
	code, stdout, stderr := cli(t, map[string]string{"DELIVERYSIM_MIN_DIR": minDir},
		"run", "--seed", "1", "--bugs", "delete-before-send", "--html", filepath.Join(missing, "x.html"))
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout, "nothing of a run is printed")
	assert.Contains(t, stderr, "--html")
	assert.Contains(t, stderr, "the directory "+missing+" does not exist")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
	entries, err := os.ReadDir(minDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the failing run was run and minimized before the refusal")

	// A directory in place of the file is refused the same way.
	code, _, stderr = cli(t, nil, "run", "--seed", "2", "--html", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "is a directory")
}

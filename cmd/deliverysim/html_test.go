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

	code, _, stderr := cli(t, nil, "run", "--seed", "2", "--html", filepath.Join(t.TempDir(), "missing", "x.html"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--html")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
}

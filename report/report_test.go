package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/scenarios"
	"github.com/deliverysim/deliverysim/sim"
)

// failingRun is seed 1 with the delete-before-send known bug: it loses
// events (no-silent-loss).
func failingRun(t *testing.T) *sim.Result {
	t.Helper()
	bugs, _, err := scenarios.ParseBugs([]string{"delete-before-send"})
	require.NoError(t, err)
	r, err := sim.Run(sim.Config{Seed: 1, Bugs: bugs})
	require.NoError(t, err)
	require.NotEmpty(t, r.Violations, "seed 1 with delete-before-send must fail for this test to mean anything")
	return r
}

func render(t *testing.T, r *sim.Result) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, WriteHTML(&b, r, Info{Bugs: []string{"delete-before-send"}, Reproduce: "deliverysim run --seed 1"}))
	return b.String()
}

// externalRef matches anything a browser would fetch.
// (url(#id) names an element of the page itself.)
var externalRef = regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:|//)|@import|url\(\s*['"]?[^#'"\s]|<script[^>]*\ssrc`)

func TestFailingRunReport(t *testing.T) {
	r := failingRun(t)
	page := render(t, r)
	assert.Contains(t, page, `class="verdict FAIL"`)
	assert.Contains(t, page, `id="violations"`)
	first := r.Violations[0]
	assert.Contains(t, page, `id="violation-1"`)
	assert.Contains(t, page, `id="violation-1-line"`, "the violation is drawn on the timeline")
	assert.Contains(t, page, first.Event, "the violation names its event")
	assert.Contains(t, page, `lane lanehl`, "the violation's bot lane is highlighted")
	assert.Contains(t, page, `hl"`, "the violation's event marks are highlighted")
	for _, inv := range oracle.Invariants() {
		assert.Contains(t, page, ">"+inv+"<", "verdict row for %s", inv)
	}
	assert.Contains(t, page, `<td class="fail">FAIL</td>`)
	for _, lane := range []string{"node-1", "bot/bot-1", "upstream/stream-1"} {
		assert.Contains(t, page, ">"+lane+"<", "lane %s", lane)
	}
	assert.Contains(t, page, `class="heal"`, "the heal is marked")
	assert.Contains(t, page, `class="window"`, "the fault window is shaded")
	assert.Contains(t, page, ">webhook-5xx<", "fault counts")
	assert.NotRegexp(t, externalRef, page, "self-contained: nothing to fetch")
	assert.Equal(t, 1, strings.Count(page, "<script>"), "one inline script (zoom, pan, filter)")
}

func TestPassingRunReport(t *testing.T) {
	r, err := sim.Run(sim.Config{Seed: 2})
	require.NoError(t, err)
	require.Empty(t, r.Violations)
	var b bytes.Buffer
	require.NoError(t, WriteHTML(&b, r, Info{}))
	page := b.String()
	assert.Contains(t, page, `class="verdict PASS"`)
	assert.NotContains(t, page, `class="violation"`)
	assert.NotContains(t, page, `class="fail"`)
}

// Untrusted text (payload-derived trace fields, details) is escaped.
func TestReportEscapes(t *testing.T) {
	r := failingRun(t)
	r.Violations[0].Detail = `<img src=x onerror=alert(1)>`
	page := render(t, r)
	assert.NotContains(t, page, `<img src=x`)
	assert.Contains(t, page, `&lt;img src=x`)
}

// artifactDir is where the Chromium test keeps its screenshot:
// $DELIVERYSIM_ARTIFACTS/report if set, else the test's artifact directory
// (go test -artifacts keeps it; otherwise it is removed).
func artifactDir(t *testing.T) string {
	if d := os.Getenv("DELIVERYSIM_ARTIFACTS"); d != "" {
		d = filepath.Join(d, "report")
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.ArtifactDir()
}

// chromium returns the browser, or skips (fails under CI=true, where .ci/run
// installs it).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; CI must have it (apt-get install -y chromium, see .ci/run)")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); CI=true makes this a failure")
	return ""
}

// TestReportInChromium loads the report of a failing run in headless
// Chromium and checks, in the DOM the browser built, that the violation is
// shown; the screenshot is kept as an artifact.
func TestReportInChromium(t *testing.T) {
	bin := chromium(t)
	r := failingRun(t)
	dir := artifactDir(t)
	page := filepath.Join(dir, "seed-1-delete-before-send.html")
	require.NoError(t, os.WriteFile(page, []byte(render(t, r)), 0o644))
	url := "file://" + page

	browse := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1400"}
		cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		require.NoError(t, err, "chromium %v: %s", args, lastLines(errb.String(), 5))
		return out.String()
	}

	dom := browse("--dump-dom")
	// Only what is missing is reported, not the whole DOM.
	for _, want := range []string{
		`id="violations"`,       // the violation summary
		`id="violation-1"`,      // its detail box
		`id="violation-1-line"`, // drawn on the timeline
		`class="verdict FAIL"`,
		r.Violations[0].Invariant,
		r.Violations[0].Event,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM Chromium built (%d bytes) has no %s", len(dom), want)
		}
	}

	shot := filepath.Join(dir, "seed-1-delete-before-send.png")
	browse("--screenshot=" + shot)
	png, err := os.ReadFile(shot)
	require.NoError(t, err, "the screenshot was written")
	require.Greater(t, len(png), 10000, "a blank page compresses to almost nothing")
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "a PNG")
	t.Logf("report and screenshot kept in %s", dir)
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

package report

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// lossCause is, independently of the report's code, the last send of a
// lost (bot, event) pair: where its loss began.
func lossCause(r *sim.Result, v oracle.Violation) (sim.Record, bool) {
	var last sim.Record
	ok := false
	for _, rec := range r.Trace {
		if rec.Kind == "send" && field(rec, "event") == v.Event && field(rec, "bot") == v.Bot {
			last, ok = rec, true
		}
	}
	return last, ok
}

var vlineRe = regexp.MustCompile(`<line class="vline" id="(violation-\d+)-line"[^>]*data-t="([0-9.]+)"`)

// Issue 28: losses were drawn at the end of the run (where every loss of
// the run piles up); each is drawn at its cause now, the event's last send.
func TestLossDrawnAtItsCause(t *testing.T) {
	r := failingRun(t)
	page := render(t, r)
	drawn := map[string]float64{}
	for _, m := range vlineRe.FindAllStringSubmatch(page, -1) {
		drawn[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	end := r.End.Sub(sim.Epoch).Seconds()
	losses := 0
	for i, v := range r.Violations {
		if v.Invariant != oracle.InvNoSilentLoss {
			continue
		}
		losses++
		c, ok := lossCause(r, v)
		require.True(t, ok, "a lost event was sent at least once in this run")
		got := drawn[fmt.Sprintf("violation-%d", i+1)]
		want := c.Time.Sub(sim.Epoch).Seconds()
		assert.InDelta(t, want, got, 1e-5, "violation %d (%s %s) drawn at %v; its last send was at %v (the run ends at %v)", i+1, v.Bot, v.Event, got, want, end)
	}
	require.NotZero(t, losses, "seed 1 with delete-before-send loses events")
	assert.True(t, strings.Contains(page, "On the timeline: drawn at its cause, step "), "the violation's box says where it is drawn")
}

var (
	svgOpen = regexp.MustCompile(`<svg id="timeline"[^>]*>`)
	attrRe  = regexp.MustCompile(`([a-z0-9-]+)="([^"]*)"`)
	circle  = regexp.MustCompile(`<circle class="m [^"]*"[^>]*>`)
)

func attrs(tag string) map[string]string {
	out := map[string]string{}
	for _, m := range attrRe.FindAllStringSubmatch(tag, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// Issue 28: the timeline was a fixed 800 px picture of the whole run. In
// headless Chromium, a page opened at #from=A&to=B&filter=BOT shows
// exactly [A, B] over the plot's width (every mark inside it where the
// view puts it) and hides the marks of every other bot. BOT is the bot of
// the first loss whose cause has marks of that bot within five seconds in
// the rendered page (a loss whose sends were never answered has none: the
// run a seed draws decides which bot that is, not this test).
func TestReportZoomAndFilterInChromium(t *testing.T) {
	bin := chromium(t)
	r := failingRun(t)
	rendered := circle.FindAllString(render(t, r), -1)
	var loss oracle.Violation
	var at float64
	for _, v := range r.Violations {
		if v.Invariant != oracle.InvNoSilentLoss {
			continue
		}
		c, ok := lossCause(r, v)
		if !ok {
			continue
		}
		cat := c.Time.Sub(sim.Epoch).Seconds()
		for _, tag := range rendered {
			a := attrs(tag)
			ts, _ := strconv.ParseFloat(a["data-t"], 64)
			if a["data-bot"] == v.Bot && math.Abs(ts-cat) <= 5 {
				loss, at = v, cat
				break
			}
		}
		if loss.Event != "" {
			break
		}
	}
	require.NotEmpty(t, loss.Event, "seed 1 loses an event whose bot has marks near the loss's cause")
	bot := loss.Bot
	from, to := at-5, at+5 // ten seconds of a run of an hour and a half: about 2 px at zoom 1

	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	require.NoError(t, os.WriteFile(page, []byte(render(t, r)), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--dump-dom",
		fmt.Sprintf("file://%s#from=%f&to=%f&filter=%s", page, from, to, bot))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "chromium: %s", lastLines(errb.String(), 5))
	dom := out.String()

	svg := attrs(svgOpen.FindString(dom))
	require.NotEmpty(t, svg, "the DOM has the timeline")
	gotFrom, _ := strconv.ParseFloat(svg["data-from"], 64)
	gotTo, _ := strconv.ParseFloat(svg["data-to"], 64)
	require.InDelta(t, from, gotFrom, 1e-3, "the script set the view (data-from %q)", svg["data-from"])
	require.InDelta(t, to, gotTo, 1e-3, "data-to %q", svg["data-to"])
	L, _ := strconv.ParseFloat(svg["data-plot-l"], 64)
	W, _ := strconv.ParseFloat(svg["data-plot-w"], 64)

	inside, shown, hidden := 0, 0, 0
	for _, tag := range circle.FindAllString(dom, -1) {
		a := attrs(tag)
		off := strings.Contains(a["class"], " off")
		if off {
			hidden++
			if a["data-bot"] == bot {
				t.Errorf("a mark of %s is hidden by the filter %s: %s", bot, bot, tag)
			}
			continue
		}
		shown++
		if !strings.Contains(a["data-bot"], bot) && !strings.Contains(a["data-event"], bot) {
			t.Errorf("the filter %s shows %s", bot, tag)
		}
		ts, _ := strconv.ParseFloat(a["data-t"], 64)
		cx, _ := strconv.ParseFloat(a["cx"], 64)
		if want := L + (ts-from)/(to-from)*W; math.Abs(cx-want) > 0.01 {
			t.Errorf("a mark at %.6fs is at x=%v; the view [%v, %v] puts it at %v", ts, cx, from, to, want)
		}
		if ts >= from && ts <= to {
			inside++
		}
	}
	assert.NotZero(t, hidden, "other bots' marks are hidden")
	assert.NotZero(t, shown, "%s's marks are shown", bot)
	assert.NotZero(t, inside, "some of %s's marks fall in the ten seconds around the loss's cause", bot)
	t.Logf("filter %s, view [%.3f, %.3f]: %d marks shown (%d in view), %d hidden", bot, from, to, shown, inside, hidden)
}

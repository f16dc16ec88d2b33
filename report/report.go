// Package report renders one simulated run as a self-contained HTML page:
// a timeline with a lane per upstream stream, engine node and bot (sends
// and their outcomes, crashes and reboots, injected faults, the fault
// window and the heal), the violations highlighted on it and listed with
// the trace lines of their event, the invariant verdicts and the fault
// counts. The page has no external assets (one inline script zooms, pans
// and filters the timeline; without it the page is the whole run), so it
// opens from a CI artifact store or a mail attachment as it is.
package report

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/sim"
)

// Info is what the caller knows about a run beyond its result.
type Info struct {
	Title     string   // default "deliverysim seed N"
	Bugs      []string // known-bug variants switched on
	Backend   string
	Reproduce string // the command that reruns it
	// Mark, if set, draws a line across the timeline at a step of the
	// run (cause's decisive step).
	Mark *Mark
}

// Mark is a step of the run to point out on the timeline.
type Mark struct {
	Step  int64
	Label string
}

// Limits keep a long run's page small enough for a browser.
const (
	maxMarks       = 20000 // timeline marks drawn (every violation's event is always drawn)
	maxEventLines  = 200   // trace lines listed per violation
	maxViolations  = 50    // violations listed (and drawn)
	laneHeight     = 22
	labelWidth     = 170
	plotWidth      = 1000
	timelinePadTop = 28
)

// WriteHTML writes the report of r to w.
func WriteHTML(w io.Writer, r *sim.Result, info Info) error {
	p := build(r, info)
	return page.Execute(w, p)
}

type pageData struct {
	Title      string
	Verdict    string // "PASS" or "FAIL"
	Failed     bool
	Seed       uint64
	Plan       string
	Backend    string
	Bugs       string
	Reproduce  string
	Simulated  string
	Quiescent  bool
	TraceLines int
	TraceHash  string

	Invariants []verdict
	Faults     []count
	Counters   []count

	Violations []violation
	MoreViol   int

	SVGWidth, SVGHeight int
	PlotL, PlotW        int     // the plot's left edge and width in the SVG
	SpanSeconds         float64 // the plot's time span at zoom 1
	Lanes               []lane
	Marks               []mark
	Ticks               []tick
	Window              *band
	Heal                *tick
	Decisive            *tick // Info.Mark
	Skipped             int
}

type verdict struct {
	Name string
	Pass bool
	N    int
}

type count struct {
	Name string
	N    int
}

type violation struct {
	ID        string
	Invariant string
	Where     string
	Detail    string
	X         float64
	T         float64 // seconds since the epoch where it is drawn
	Cause     string  // what it is drawn at, when not at its own time
	Lines     []string
	More      int
}

type lane struct {
	Name      string
	Y         int
	Highlight bool
}

type mark struct {
	X, Y  float64
	T     float64 // seconds since the epoch, for the page's zoom
	Bot   string  // for the page's filter
	Event string
	Class string
	Shape string // "tick", "dot", "diamond", "bar"
	Title string
	HL    bool
}

type tick struct {
	X     float64
	T     float64
	Label string
}

type band struct {
	X, W float64
}

func build(r *sim.Result, info Info) pageData {
	p := pageData{
		Title: info.Title, Seed: r.Seed, Plan: r.Plan.String(), Backend: cmp.Or(info.Backend, "memory"),
		Bugs: strings.Join(info.Bugs, ", "), Reproduce: info.Reproduce, Quiescent: r.Quiescent,
		TraceLines: len(r.Trace), TraceHash: r.TraceHash, Failed: len(r.Violations) > 0,
		Simulated: r.End.Sub(sim.Epoch).Round(time.Millisecond).String(),
	}
	if p.Title == "" {
		p.Title = fmt.Sprintf("deliverysim seed %d", r.Seed)
	}
	p.Verdict = "PASS"
	if p.Failed {
		p.Verdict = "FAIL"
	}
	if p.Bugs == "" {
		p.Bugs = "none"
	}
	failed := map[string]int{}
	for _, v := range r.Violations {
		failed[v.Invariant]++
	}
	for _, inv := range oracle.Invariants() {
		p.Invariants = append(p.Invariants, verdict{Name: inv, Pass: failed[inv] == 0, N: failed[inv]})
		delete(failed, inv)
	}
	// Pseudo-invariants the caller added (e.g. determinism), in a stable order.
	var extra []string
	for inv := range failed {
		extra = append(extra, inv)
	}
	slices.Sort(extra)
	for _, inv := range extra {
		p.Invariants = append(p.Invariants, verdict{Name: inv, N: failed[inv]})
	}
	for _, k := range faults.All() {
		p.Faults = append(p.Faults, count{Name: string(k), N: r.Faults[k]})
	}
	c := r.Counters
	p.Counters = []count{{"events", c.Events}, {"obligations", c.Obligations}, {"sends", c.Sends},
		{"deliveries", c.Deliveries}, {"duplicates", c.Duplicates}, {"retries", c.Retries},
		{"dead letters", c.DeadLetters}, {"retention drops", c.RetentionDrops}, {"rejected", c.Rejected},
		{"crashes", c.Crashes}, {"batches", c.Batches}, {"engine errors", c.EngineErrors}}
	timeline(&p, r, info.Mark)
	return p
}

// field returns the value of key k in rec.
func field(rec sim.Record, k string) string {
	for _, f := range rec.Fields {
		if f.K == k {
			return f.V
		}
	}
	return ""
}

// laneOf names the lane a record is drawn on ("" = not drawn).
func laneOf(rec sim.Record) string {
	switch {
	case rec.Actor == "sim", rec.Actor == "operator":
		return ""
	case rec.Actor == "registry" && rec.Kind != "fault":
		return ""
	}
	return rec.Actor
}

// style classifies a record for the timeline ("" = not drawn).
func style(rec sim.Record) (class, shape string) {
	switch rec.Kind {
	case "send":
		return "send", "tick"
	case "result":
		if field(rec, "outcome") == "ok" {
			return "ok", "dot"
		}
		return "bad", "dot"
	case "result-lost", "result-late":
		// result-late: an answer handed to a node that had given its
		// request up.
		return "lost", "dot"
	case "handled":
		return "ok", "dot"
	case "duplicate":
		return "dup", "dot"
	case "refused", "rejected", "failed", "busy", "unavailable":
		return "bad", "dot"
	case "fault":
		return "fault", "diamond"
	case "crash":
		return "crash", "bar"
	case "boot":
		return "boot", "bar"
	case "dead-letter":
		return "dead", "diamond"
	case "produce":
		return "produce", "tick"
	case "batch":
		return "batch", "dot"
	case "key-published":
		return "boot", "diamond"
	}
	return "", ""
}

// laneRank orders lanes: streams, then nodes, then bots, then the rest.
func laneRank(name string) int {
	switch {
	case strings.HasPrefix(name, "upstream/"), strings.HasPrefix(name, "source/"):
		return 0
	case strings.HasPrefix(name, "node-"):
		return 1
	case strings.HasPrefix(name, "bot/"):
		return 2
	}
	return 3
}

func timeline(p *pageData, r *sim.Result, m *Mark) {
	end := r.End
	for _, rec := range r.Trace {
		if rec.Time.After(end) {
			end = rec.Time
		}
	}
	span := end.Sub(sim.Epoch)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 {
		return float64(labelWidth) + float64(t.Sub(sim.Epoch))/float64(span)*plotWidth
	}
	secs := func(t time.Time) float64 { return t.Sub(sim.Epoch).Seconds() }
	p.PlotL, p.PlotW, p.SpanSeconds = labelWidth, plotWidth, span.Seconds()

	// Lanes, in a fixed order.
	seen := map[string]bool{}
	var names []string
	for _, rec := range r.Trace {
		if l := laneOf(rec); l != "" && !seen[l] {
			seen[l] = true
			names = append(names, l)
		}
	}
	slices.SortStableFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(laneRank(a), laneRank(b)), strings.Compare(a, b))
	})

	// What the violations point at.
	hlEvent := map[string]bool{}
	hlLane := map[string]bool{}
	for i, v := range r.Violations {
		if i == maxViolations {
			break
		}
		if v.Event != "" {
			hlEvent[v.Event] = true
		}
		if v.Bot != "" {
			hlLane["bot/"+v.Bot] = true
		}
	}
	laneY := map[string]int{}
	for i, n := range names {
		y := timelinePadTop + i*laneHeight
		laneY[n] = y
		p.Lanes = append(p.Lanes, lane{Name: n, Y: y, Highlight: hlLane[n]})
	}
	p.SVGWidth = labelWidth + plotWidth + 20
	p.SVGHeight = timelinePadTop + len(names)*laneHeight + 10

	// Marks: every mark of a highlighted event first, then the rest while
	// the budget lasts.
	for pass := range 2 {
		for _, rec := range r.Trace {
			l := laneOf(rec)
			class, shape := style(rec)
			if l == "" || class == "" {
				continue
			}
			hl := hlEvent[field(rec, "event")]
			if (pass == 0) != hl {
				continue
			}
			if pass == 1 && len(p.Marks) >= maxMarks {
				p.Skipped++
				continue
			}
			bot := field(rec, "bot")
			if b, ok := strings.CutPrefix(rec.Actor, "bot/"); ok {
				bot = b
			}
			p.Marks = append(p.Marks, mark{
				X: x(rec.Time), Y: float64(laneY[l] + laneHeight/2), T: secs(rec.Time), Bot: bot, Event: cmp.Or(field(rec, "event"), field(rec, "first")),
				Class: class, Shape: shape, Title: rec.String(), HL: hl,
			})
		}
	}

	// Time axis: about ten ticks at round durations.
	step := niceStep(span / 10)
	for t := time.Duration(0); t <= span; t += step {
		p.Ticks = append(p.Ticks, tick{X: x(sim.Epoch.Add(t)), T: t.Seconds(), Label: t.String()})
	}
	if !r.HealAt.IsZero() {
		p.Window = &band{X: float64(labelWidth), W: x(r.HealAt) - float64(labelWidth)}
		p.Heal = &tick{X: x(r.HealAt), T: secs(r.HealAt), Label: "heal " + r.HealAt.Sub(sim.Epoch).Round(time.Millisecond).String()}
	}
	if m != nil {
		// At the step's time: its first record says when it ran.
		for _, rec := range r.Trace {
			if rec.Step == m.Step {
				p.Decisive = &tick{X: x(rec.Time), T: secs(rec.Time), Label: m.Label + " at " + rec.Time.Sub(sim.Epoch).Round(time.Millisecond).String()}
				break
			}
		}
	}

	// Violations, with the trace lines of their event.
	for i, v := range r.Violations {
		if i == maxViolations {
			p.MoreViol = len(r.Violations) - i
			break
		}
		at := v.Time
		vv := violation{ID: fmt.Sprintf("violation-%d", i+1), Invariant: v.Invariant, Detail: v.Detail,
			Where: fmt.Sprintf("step %d, t=%s", v.Step, v.Time.Sub(sim.Epoch).Round(time.Microsecond))}
		if c, ok := cause(r, v); ok {
			at = c.Time
			vv.Cause = fmt.Sprintf("drawn at its cause, step %d: %s", c.Step, c.String())
		}
		vv.X, vv.T = x(at), secs(at)
		if v.Bot != "" {
			vv.Where += ", bot " + v.Bot
		}
		if v.Event != "" {
			vv.Where += ", event " + v.Event
			for _, rec := range r.Trace {
				if field(rec, "event") != v.Event && field(rec, "first") != v.Event {
					continue
				}
				if len(vv.Lines) == maxEventLines {
					vv.More++
					continue
				}
				vv.Lines = append(vv.Lines, rec.String())
			}
		}
		p.Violations = append(p.Violations, vv)
	}
}

// niceStep rounds d up to 1, 2 or 5 times a power of ten of a unit.
func niceStep(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	for unit := time.Millisecond; ; unit *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if m*unit >= d {
				return m * unit
			}
		}
	}
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"f": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	// Times in data-t keep microseconds: a zoomed view of a long run must
	// still tell apart events a millisecond apart.
	"ts":  func(v float64) string { return fmt.Sprintf("%.6f", v) },
	"add": func(a, b float64) float64 { return a + b },
	"sub": func(a, b float64) float64 { return a - b },
	"odd": func(i int) bool { return i%2 == 1 },
}).Parse(pageHTML))

// cause finds where a violation judged at the end of the run comes from:
// a loss is decided when the run ends, but what lost the event is its
// last send, ack or delete for that bot, and that is where the timeline
// draws it (at the end it sits on top of every other such line).
func cause(r *sim.Result, v oracle.Violation) (sim.Record, bool) {
	if v.Event == "" || (v.Invariant != oracle.InvNoSilentLoss && v.Time.Before(r.End)) {
		return sim.Record{}, false
	}
	var last sim.Record
	found := false
	for _, rec := range r.Trace {
		if rec.Step > v.Step && v.Step > 0 {
			break
		}
		if field(rec, "event") != v.Event {
			continue
		}
		if v.Bot != "" && field(rec, "bot") != v.Bot && rec.Actor != "bot/"+v.Bot {
			continue
		}
		switch {
		case rec.Kind == "send", rec.Kind == "dead-letter",
			rec.Kind == "note" && (field(rec, "kind") == "acked" || strings.Contains(field(rec, "kind"), "delet") || strings.HasPrefix(field(rec, "kind"), "retention")):
			last, found = rec, true
		}
	}
	return last, found
}

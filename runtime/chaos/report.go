// The report: counts, verdicts per invariant and the violations that fail a run.

package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Report is the result of a run.
type Report struct {
	Seed     uint64         `json:"seed"`
	Duration string         `json:"duration"`
	Engine   []string       `json:"engine_cmd"`
	Schedule []faults.Fault `json:"schedule"`
	// Args: the chaos flags that give this plan and workload (and the
	// declared settings); chaos --replay REPORT.json runs them again.
	Args []string `json:"args"`
	// Rerun: the command line that runs Args again (set by the CLI, which
	// knows its own name).
	Rerun      string `json:"rerun,omitempty"`
	Note       string `json:"note"`
	Produced   int    `json:"produced"`
	Owed       int    `json:"obligations"`
	Delivered  int    `json:"delivered"`
	DeadLetter int    `json:"dead_lettered"`
	// RetentionMayDrop: obligations never handled that the engine's
	// declared retention may have dropped (mayDrop), counted apart from
	// dead letters and losses.
	RetentionMayDrop int                `json:"retention_may_drop"`
	Lost             int                `json:"lost"`
	Duplicates       Duplicates         `json:"duplicates"`
	Kills            int                `json:"kills"`
	DBCuts           int                `json:"db_cuts"`
	BotFaults        int                `json:"bot_faults"`
	Restarts         int                `json:"unexpected_exits"`
	LatencyMs        Latency            `json:"delivery_latency_ms"`
	Quiescent        bool               `json:"quiescent"`
	SettledIn        string             `json:"settled_in"`
	Metrics          MetricsSeen        `json:"metrics"`
	Invariants       map[string]string  `json:"invariants"`
	Violations       []oracle.Violation `json:"violations"`
	// Verdicts: per invariant, PASS, FAIL or "not judged" and why.
	Verdicts []Verdict `json:"verdicts"`
	// Observation: what the engine's optional observation endpoint gave
	// ("served", or why there was no reading).
	Observation string `json:"observation_endpoint"`
	// Bounds: the declared settings the checks count against.
	Bounds Bounds `json:"bounds"`
	// WireCases: per rule judged with the declared settings, how many
	// cases this run gave it (retry-backoff: retries after a written
	// failure; in-flight-limit: bots a process kept at the declared limit;
	// breaker-policy: open periods; resume-from-cursor: resumes;
	// reported-counters: processes read). A PASS on 0 cases says nothing.
	WireCases map[string]int `json:"wire_rule_cases"`
	EngineLog []string       `json:"engine_log_tail,omitempty"`
	// Coverage: each situation of PROTOCOL.md the workload aims at, how
	// often this run reached it, and why not when it did not (coverage.go);
	// NotReached names those with a count of 0.
	Coverage   []Situation `json:"coverage"`
	NotReached []string    `json:"not_reached"`
	// Interrupted: SIGINT or SIGTERM ended the run early; the verdicts
	// cover what was observed until then (losses and liveness are not
	// meaningful before the settle).
	Interrupted bool `json:"interrupted"`
}

// Bounds are the settings the checks count against.
type Bounds struct {
	MaxAttempts    int    `json:"max_attempts"`
	WebhookTimeout string `json:"webhook_timeout"`
	KillWindow     string `json:"kill_window"`
	HOLBound       string `json:"head_of_line_bound"`
}

// Duplicates on the wire (requests from the engine beyond the first per
// bot and event), injected by the harness (a request replayed to the
// receiver), and at handlers (runs beyond the first: must stay 0 within
// the dedup window).
type Duplicates struct {
	Wire     int `json:"wire"`
	Handler  int `json:"handler"`
	Injected int `json:"injected"`
}

// Latency is produced-to-first-handler-run, per (bot, event).
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// MetricsSeen is what scraping the engine's /metrics during the run found
// (summed over incarnations: each process starts its counters at zero).
type MetricsSeen struct {
	Scrapes int     `json:"scrapes"`
	Acked   float64 `json:"acked_total"`
	Sent    float64 `json:"sent_total"`
	// StoreErrors: store calls that failed, as the engine counted them
	// (deliverysim_engine_store_errors_total), over every process.
	StoreErrors float64 `json:"store_errors_total"`
}

// Harness-level invariants beside the checker's.
const (
	InvSigned       = "signed-requests" // no request from the engine was rejected by a healthy receiver
	InvCleanStop    = "clean-shutdown"  // SIGTERM after the run: exit 0
	InvMetrics      = "metrics"         // the reference engine's /metrics showed deliveries
	InvNoCrash      = "no-unexpected-exit"
	notJudged       = "not judged"
	streamLog       = "log-1"
	streamTimestamp = "ts-1"
)

func (h *harness) report(plan []faults.Fault, c faultCounts, restarts int, quiet bool, settled time.Duration,
	exitErr error, killed bool) *Report {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	h.mu.Lock()
	ms := h.scrapes
	h.mu.Unlock()
	p := h.judgeParams()
	rep := &Report{
		Seed: h.cfg.Seed, Duration: h.cfg.Duration.String(), Engine: h.cfg.EngineCmd, Schedule: plan, Args: h.cfg.Args,
		Note:     "real time is not deterministic: rerunning the seed repeats the plan and the workload, not the interleaving",
		Produced: len(r.order), Kills: c.kills, DBCuts: c.cuts, BotFaults: c.bot, Restarts: restarts,
		Quiescent: quiet, SettledIn: settled.Round(time.Millisecond).String(), Metrics: ms,
		Invariants: map[string]string{}, Observation: "served",
		Bounds: Bounds{MaxAttempts: p.MaxAttempts, WebhookTimeout: p.WebhookTimeout.String(), KillWindow: p.KillWindow.String(), HOLBound: p.HOLBound.String()},
	}
	if r.atHeal == nil || r.atEnd == nil {
		rep.Observation = "no reading: " + r.observeNote
	}
	rep.Coverage, rep.NotReached = h.coverage(plan), []string{}
	for _, c := range rep.Coverage {
		if c.Count == 0 {
			rep.NotReached = append(rep.NotReached, c.Name)
		}
	}
	reqs := r.byKey()
	for _, qs := range reqs {
		rep.Duplicates.Wire += len(qs) - 1
	}
	for _, n := range r.handlerRuns {
		rep.Duplicates.Handler += n - 1
	}
	rep.Duplicates.Injected = r.dups
	rep.LatencyMs = latency(r.latencies)
	v := r.retentionView(p)
	r.obligations(func(id string, _ *produced, bot string) {
		rep.Owed++
		k := key{bot, id}
		_, handled := r.firstHandled[k]
		switch {
		case handled:
			rep.Delivered++
		case r.resolved(k, reqs[k], p, nil): // resolved with no retention: dead-lettered
			rep.DeadLetter++
		case v.mayDrop(k):
			rep.RetentionMayDrop++
		}
	})

	j := judge(r, p)
	rep.WireCases = map[string]int{}
	for _, c := range r.wireRules(p) {
		if c.why == "" {
			rep.WireCases[c.inv] = c.cases
		}
	}
	for inv, n := range r.snapCases(p) {
		rep.WireCases[inv] = n
	}
	var own []oracle.Violation
	add := func(inv, format string, args ...any) {
		own = append(own, oracle.Violation{Invariant: inv, Time: time.Now(), Detail: fmt.Sprintf(format, args...)})
	}
	byInv := func(inv string) []oracle.Violation {
		var out []oracle.Violation
		for _, v := range own {
			if v.Invariant == inv {
				out = append(out, v)
			}
		}
		return out
	}
	if r.rejections > 0 {
		add(InvSigned, "%d requests were rejected by a receiver holding the bot's secret (e.g. %s)", r.rejections, strings.Join(r.rejectDetail, "; "))
	}
	switch {
	case killed:
		add(InvCleanStop, "the engine did not exit within 15s of SIGTERM (killed)")
	case exitErr != nil:
		add(InvCleanStop, "after SIGTERM the engine exited with %v", exitErr)
	}
	for _, e := range r.harnessErrs {
		add(InvNoCrash, "%s", e)
	}
	j.judged(InvSigned, byInv(InvSigned))
	j.judged(InvCleanStop, byInv(InvCleanStop))
	j.judged(InvNoCrash, byInv(InvNoCrash))
	switch {
	case ms.Scrapes == 0 && !h.cfg.Reference:
		j.notJudged(InvMetrics, "the engine served no /metrics with deliverysim_engine_acked_total and deliverysim_engine_sent_total")
	default:
		if ms.Scrapes == 0 || ms.Acked == 0 || ms.Sent == 0 {
			add(InvMetrics, "/metrics scraped %d times showed acked_total %v, sent_total %v; the delivery counters must be non-zero", ms.Scrapes, ms.Acked, ms.Sent)
		}
		j.judged(InvMetrics, byInv(InvMetrics))
	}
	sort.SliceStable(j.verdicts, func(a, b int) bool { return j.verdicts[a].Invariant < j.verdicts[b].Invariant })
	rep.Verdicts = j.verdicts
	for _, v := range j.verdicts {
		rep.Invariants[v.Invariant] = v.Verdict
	}
	rep.Violations = j.violations
	if rep.Violations == nil {
		rep.Violations = []oracle.Violation{}
	}
	for _, v := range rep.Violations {
		if v.Invariant == oracle.InvNoSilentLoss {
			rep.Lost++
		}
	}
	return rep
}

func latency(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Latency{P50: ms(s[len(s)/2]), P99: ms(s[len(s)*99/100]), Max: ms(s[len(s)-1])}
}

// Failed reports whether the run broke any invariant.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

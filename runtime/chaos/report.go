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
	Seed       uint64             `json:"seed"`
	Duration   string             `json:"duration"`
	Engine     []string           `json:"engine_cmd"`
	Schedule   []faults.Fault     `json:"schedule"`
	Note       string             `json:"note"`
	Produced   int                `json:"produced"`
	Owed       int                `json:"obligations"`
	Delivered  int                `json:"delivered"`
	DeadLetter int                `json:"dead_lettered"`
	Lost       int                `json:"lost"`
	Duplicates Duplicates         `json:"duplicates"`
	Kills      int                `json:"kills"`
	DBCuts     int                `json:"db_cuts"`
	BotFaults  int                `json:"bot_faults"`
	Restarts   int                `json:"unexpected_exits"`
	LatencyMs  Latency            `json:"delivery_latency_ms"`
	Quiescent  bool               `json:"quiescent"`
	SettledIn  string             `json:"settled_in"`
	Metrics    MetricsSeen        `json:"metrics"`
	Invariants map[string]string  `json:"invariants"`
	Violations []oracle.Violation `json:"violations"`
	// Unjudged: what the checks this workload cannot judge reported (their
	// verdicts are "not judged"); they do not fail the run.
	Unjudged  []oracle.Violation `json:"unjudged_findings,omitempty"`
	Stats     oracle.CheckStats  `json:"stats"`
	EngineLog []string           `json:"engine_log_tail,omitempty"`
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
	res oracle.CheckReport, exitErr error, killed bool) *Report {
	r := h.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	h.mu.Lock()
	ms := h.scrapes
	h.mu.Unlock()
	rep := &Report{
		Seed: h.cfg.Seed, Duration: h.cfg.Duration.String(), Engine: h.cfg.EngineCmd, Schedule: plan,
		Note:     "real time is not deterministic: rerunning the seed repeats the plan and the workload, not the interleaving",
		Produced: len(r.order), Owed: res.Stats.Obligations, Delivered: res.Stats.Handled, DeadLetter: res.Stats.DeadLettered,
		Kills: c.kills, DBCuts: c.cuts, BotFaults: c.bot, Restarts: restarts,
		Quiescent: quiet, SettledIn: settled.Round(time.Millisecond).String(), Metrics: ms,
		Violations: res.Violations, Stats: res.Stats, Invariants: map[string]string{},
	}
	for k, n := range r.requests {
		if n > 1 {
			rep.Duplicates.Wire += n - 1
		}
		_ = k
	}
	for _, n := range r.handlerRuns {
		rep.Duplicates.Handler += n - 1
	}
	rep.Duplicates.Injected = r.dups
	rep.LatencyMs = latency(r.latencies)

	add := func(inv, format string, args ...any) {
		rep.Violations = append(rep.Violations, oracle.Violation{Invariant: inv, Time: time.Now(), Detail: fmt.Sprintf(format, args...)})
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
	if h.cfg.Reference && (ms.Scrapes == 0 || ms.Acked == 0 || ms.Sent == 0) {
		add(InvMetrics, "/metrics scraped %d times showed acked_total %v, sent_total %v; the delivery counters must be non-zero", ms.Scrapes, ms.Acked, ms.Sent)
	}
	if rep.Violations == nil {
		rep.Violations = []oracle.Violation{}
	}
	for _, v := range rep.Violations {
		if v.Invariant == oracle.InvNoSilentLoss {
			rep.Lost++
		}
	}
	// Verdicts: what this workload cannot exercise is said so.
	judged := append(oracle.Invariants(), InvSigned, InvCleanStop, InvNoCrash)
	if h.cfg.Reference {
		judged = append(judged, InvMetrics)
	}
	for _, inv := range judged {
		rep.Invariants[inv] = "PASS"
	}
	// retry-backoff and breaker-policy need the engine's clock at each send
	// and each answer it was told, which a real process does not report;
	// resend-with-cause, which answers reached the process and which of its
	// store's Acks committed (the harness sees the bots' side and polls the
	// queue); reported-counters and resume-from-cursor, what the process
	// was told by its store (its cursors, read over its own SQL
	// connection); settings-validation probes the engine in-process
	// (sim/settings.go); in-flight-limit pairs each request with the answer
	// the engine was told, by request number, which a real process does
	// not report; snapshot-progress needs snapshot sources, which this
	// workload does not have (nor a report of what the snapshot worker
	// handed a node).
	for _, inv := range []string{oracle.InvRetentionBounds, oracle.InvSnapshotConvergence, oracle.InvSnapshotIsolation,
		oracle.InvRetryBackoff, oracle.InvBreakerPolicy, oracle.InvReportedCounters, oracle.InvSettingsValidation,
		oracle.InvResumeFromCursor, oracle.InvInFlightLimit, oracle.InvResendWithCause,
		oracle.InvSnapshotProgress} {
		rep.Invariants[inv] = notJudged
	}
	// A check this workload cannot judge lacks observations it relies on
	// (above), so what it reports is not a verdict: it is kept beside the
	// violations, for a reader, and does not fail the run.
	kept := rep.Violations[:0]
	for _, v := range rep.Violations {
		if rep.Invariants[v.Invariant] == notJudged {
			rep.Unjudged = append(rep.Unjudged, v)
			continue
		}
		kept = append(kept, v)
		rep.Invariants[v.Invariant] = "FAIL"
	}
	rep.Violations = kept
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

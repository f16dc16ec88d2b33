// The smoke check: a quick, fault-light walk through the protocol, one
// step at a time, so an implementer learns in seconds which part of
// PROTOCOL.md the engine does not speak yet.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/internal/pgschema"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// How long the smoke check waits is set by the engine's progress, not by
// the machine's speed: a fixed 15 s for the whole check failed the
// reference on a loaded machine while it was still handing events off
// (paging 524 of 600, registry 256 of 600; PROTOCOL.md, Smoke check).
const (
	// SmokeQuiet: a step fails once what it waits for (events handled,
	// the one request it expects) has not moved for this long. An engine
	// that hangs or stops paging is caught SmokeQuiet after its last
	// progress, however slow the machine made what came before.
	SmokeQuiet = 5 * time.Second
	// smokeStartQuiet: a step that starts the engine process gives it
	// this long for its first sign of life (a process start, its
	// database connection and schema).
	smokeStartQuiet = 2 * SmokeQuiet
	// SmokeCeiling bounds the whole check however steadily its steps
	// progress (a hang detector: an engine trickling one event per few
	// seconds); the steps it leaves are reported not reached.
	SmokeCeiling = 3 * time.Minute
)

// smokeBacklog is produced before the engine starts: more than one
// upstream answer holds, so the engine must page with next=.
const smokeBacklog = 600

// SmokeStep is one step's outcome.
type SmokeStep struct {
	Step   string `json:"step"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Took   string `json:"took"`
	// NotReached: earlier steps ran into SmokeCeiling, so this one did
	// not run. Not OK (the check is incomplete), but no verdict on
	// the step itself: a restart given 0 s used to read as a FAIL.
	NotReached bool `json:"not_reached,omitempty"`
}

// SmokeReport is the whole check.
type SmokeReport struct {
	Engine []string    `json:"engine_cmd"`
	Steps  []SmokeStep `json:"steps"`
	Took   string      `json:"took"`
}

// Failed reports whether a step failed.
func (r *SmokeReport) Failed() bool {
	for _, s := range r.Steps {
		if !s.OK {
			return true
		}
	}
	return false
}

// Smoke runs the protocol check on cfg's engine (its EngineCmd, EngineEnv,
// DSN and Engine settings; the fault and workload fields are ignored).
// Steps: start (the engine asks the upstream for events), paging (a
// backlog longer than one answer reaches bot-0), registry (nothing goes to bot-1 before
// its key is published; everything after), delivery (a live event on the
// timestamp stream), signing (no request failed the receivers' signature
// check, bot-2's with its own secret included), retry (an event answered 500 once is sent again),
// restart (after a SIGKILL, events produced while the engine was down are
// delivered), shutdown (SIGTERM exits 0).
func Smoke(ctx context.Context, cfg Config) (rep *SmokeReport, err error) {
	cfg.Defaults()
	if len(cfg.EngineCmd) == 0 || cfg.DSN == "" {
		return nil, fmt.Errorf("smoke needs an engine command and a Postgres DSN")
	}
	h := &harness{cfg: cfg, byID: map[string]*bot{}, rec: newRecorder()}
	h.schema = pgschema.Name(pgschema.KindRun, "chaos_smoke", time.Now())
	if err := createSchema(ctx, cfg.DSN, h.schema); err != nil {
		return nil, err
	}
	defer func() {
		if derr := dropSchema(cfg.DSN, h.schema); derr != nil && err == nil {
			err = derr
		}
	}()
	dir, logf, closeDir, err := workDir(TempPrefixSmoke)
	if err != nil {
		return nil, err
	}
	defer closeDir()

	upURL, regURL, stopProto, err := h.serveProtocol()
	if err != nil {
		return nil, err
	}
	defer stopProto()
	for i := range 3 {
		b, err := newBot(fmt.Sprintf("bot-%d", i), []byte(fmt.Sprintf("smoke-secret-%d-0123456789", i)), h.rec, cfg.Engine.WebhookTimeout, time.Hour)
		if err != nil {
			return nil, err
		}
		defer b.close()
		h.bots = append(h.bots, b)
		h.byID[b.id] = b
	}
	// bot-0: both streams; bot-1: the log stream, key published later;
	// bot-2: the timestamp stream (a second secret to sign with).
	h.up.AddStream(streamLog, engine.LogStream)
	h.up.AddStream(streamTimestamp, engine.TimestampStream)
	h.rec.mu.Lock()
	for i, b := range h.bots {
		h.reg.AddBot(protocol.Bot{ID: b.id, Secret: b64(b.secret), URL: b.url(), HasKey: i != 1})
		h.rec.keyless[b.id] = i == 1
	}
	h.addMembershipLocked(streamLog, "bot-0", impl.Position{}, true)
	h.addMembershipLocked(streamLog, "bot-1", impl.Position{}, true)
	h.addMembershipLocked(streamTimestamp, "bot-0", impl.Position{}, true)
	h.addMembershipLocked(streamTimestamp, "bot-2", impl.Position{}, true)
	h.rec.mu.Unlock()
	seq := 0
	produce := func(stream string, n int) []string {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		var ids []string
		for range n {
			seq++
			id := fmt.Sprintf("smoke-%06d", seq)
			// Valid JSON that no serialiser writes back byte for byte
			// (Python's json.dumps adds spaces, JSON.stringify drops the
			// space and writes 1.0 as 1), so a signature over a parsed
			// and re-encoded body fails the signing step.
			payload := fmt.Appendf(nil, `{"smoke":%d, "n":1.0}`, seq)
			if pos, ok := h.up.Produce(stream, id, payload, time.Now()); ok {
				h.rec.producedLocked(stream, stream == streamLog, id, pos, payload)
				ids = append(ids, id)
			}
		}
		h.up.Seal(stream)
		return ids
	}
	backlog := produce(streamLog, smokeBacklog)

	if h.listen, err = stableAddr(); err != nil {
		return nil, err
	}
	argv := append(append([]string(nil), cfg.EngineCmd...),
		"--upstream", upURL, "--registry", regURL, "--listen", h.listen, "--dsn", cfg.DSN, "--schema", h.schema)
	env, err := stateEnv(dir, cfg.EngineEnv)
	if err != nil {
		return nil, err
	}
	h.eng = &engineProc{argv: argv, env: env, log: logf}
	defer h.eng.kill()

	rep = &SmokeReport{Engine: cfg.EngineCmd}
	start := time.Now()
	// On every return with a report: a check that stopped early printed
	// "smoke check took " and no duration.
	defer func() {
		if rep != nil {
			rep.Took = time.Since(start).Round(time.Millisecond).String()
		}
	}()
	ceiling := start.Add(SmokeCeiling)
	step := func(name string, quiet time.Duration, run func(w *progressWait) (bool, string)) bool {
		t := time.Now()
		if quiet > 0 && !t.Before(ceiling) {
			rep.Steps = append(rep.Steps, notReached(name))
			return false
		}
		w := &progressWait{ctx: ctx, quiet: quiet, ceiling: ceiling, now: time.Now, sleep: sleepCtx}
		ok, detail := run(w)
		if !ok {
			detail += w.why()
		}
		h.rec.mu.Lock()
		if rejected := h.rec.rejections; !ok && rejected > 0 && name != "signing" {
			// A signature the receivers refuse explains most failures
			// after it: say so rather than blame the step.
			detail += fmt.Sprintf(" (the receivers rejected %d requests so far: see the signing step)", rejected)
		}
		h.rec.mu.Unlock()
		rep.Steps = append(rep.Steps, SmokeStep{Step: name, OK: ok, Detail: detail, Took: time.Since(t).Round(time.Millisecond).String()})
		return ok
	}
	handled := func(bot string, ids []string) int {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		n := 0
		for _, id := range ids {
			if _, ok := h.rec.firstHandled[key{bot, id}]; ok {
				n++
			}
		}
		return n
	}
	requested := func(bot, id string) bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		for _, q := range h.rec.requests {
			if q.bot == bot && q.event == id {
				return true
			}
		}
		return false
	}
	served := func() int {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		n := 0
		for _, e := range h.rec.events {
			if len(e.served) > 0 {
				n++
			}
		}
		return n
	}

	if err := h.eng.start(); err != nil {
		return nil, err
	}
	neverRan := ""
	started := step("start", smokeStartQuiet, func(w *progressWait) (bool, string) {
		if w.until(func() (int, bool) { n := served(); return n, n > 0 || !h.eng.running() }) && h.eng.running() {
			return true, ""
		}
		if !h.eng.running() {
			if served() == 0 {
				neverRan = h.eng.exitDetail()
			}
			return false, fmt.Sprintf("the engine exited (%s)", h.eng.exitDetail())
		}
		return false, "the engine asked the upstream for no event (GET {upstream}/v1/streams/{stream}/events, PROTOCOL.md Upstream)"
	})
	if neverRan != "" {
		// Not a protocol step that failed: no step could be checked (a
		// missing engine file, a wrong interpreter, a flag it refuses).
		// The command could not run as asked.
		return nil, fmt.Errorf("%w before the upstream served it anything (%s); check --engine-cmd", ErrEngineExited, neverRan)
	}
	if !started {
		return rep, nil
	}
	step("paging", SmokeQuiet, func(w *progressWait) (bool, string) {
		if w.until(func() (int, bool) { n := handled("bot-0", backlog); return n, n == len(backlog) }) {
			return true, ""
		}
		n := handled("bot-0", backlog)
		hint := ""
		if n > 0 && n <= maxAnswer {
			hint = fmt.Sprintf("; one answer holds at most %d events: continue with next= from the answer", maxAnswer)
		}
		return false, fmt.Sprintf("bot-0 handled %d of the %d events produced before the engine started%s", n, len(backlog), hint)
	})
	step("registry", SmokeQuiet, func(w *progressWait) (bool, string) {
		h.rec.mu.Lock()
		early := 0
		for _, q := range h.rec.requests {
			if q.bot == "bot-1" {
				early++
			}
		}
		h.reg.PublishKey("bot-1")
		h.rec.keyPublishedLocked("bot-1")
		h.rec.mu.Unlock()
		if early > 0 {
			return false, fmt.Sprintf("%d requests went to bot-1 while the registry showed has_key: false (hold them until the key is published)", early)
		}
		if w.until(func() (int, bool) { n := handled("bot-1", backlog); return n, n == len(backlog) }) {
			return true, ""
		}
		return false, fmt.Sprintf("after bot-1's key was published bot-1 handled %d of %d held events (watch the registry: GET /v1/registry?after=VERSION&wait=)", handled("bot-1", backlog), len(backlog))
	})
	step("delivery", SmokeQuiet, func(w *progressWait) (bool, string) {
		ids := produce(streamTimestamp, 1)
		if w.until(func() (int, bool) {
			n := handled("bot-0", ids)
			if requested("bot-2", ids[0]) {
				n++
			}
			return n, n == 2
		}) {
			return true, ""
		}
		return false, fmt.Sprintf("a live event on the timestamp stream %s: bot-0 handled %d of 1, bot-2 was sent it: %v", streamTimestamp, handled("bot-0", ids), requested("bot-2", ids[0]))
	})
	step("signing", 0, func(*progressWait) (bool, string) {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		if h.rec.rejections == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d requests failed the receiver's check (webhook-signature = v1,base64(HMAC-SHA256(secret, id.timestamp.body))): %s", h.rec.rejections, h.rec.rejectDetail[0])
	})
	// The retry waits out the engine's backoff as well: quiet for that long
	// and twice the declared longest backoff.
	retryQuiet := SmokeQuiet + 2*cfg.Engine.MaxBackoff
	step("retry", retryQuiet, func(w *progressWait) (bool, string) {
		b := h.byID["bot-0"]
		b.setMode(mode5xx)
		ids := produce(streamLog, 1)
		got := w.until(func() (int, bool) { ok := requested("bot-0", ids[0]); return 0, ok })
		b.setMode(modeHealthy)
		if !got {
			return false, "the event to retry was never sent to bot-0"
		}
		if w.until(func() (int, bool) { n := handled("bot-0", ids); return n, n == 1 }) {
			return true, ""
		}
		return false, fmt.Sprintf("bot-0 answered 500 once and the event was not sent again (retry failed attempts with backoff; declared --max-backoff %s)", cfg.Engine.MaxBackoff)
	})
	step("restart", smokeStartQuiet, func(w *progressWait) (bool, string) {
		h.eng.kill()
		ids := produce(streamLog, 3)
		if err := h.eng.start(); err != nil {
			return false, err.Error()
		}
		if w.until(func() (int, bool) {
			n := handled("bot-0", ids) + handled("bot-1", ids)
			return n, n == 2*len(ids)
		}) {
			return true, ""
		}
		return false, fmt.Sprintf("after a SIGKILL and a restart, of 3 events produced while the engine was down bot-0 handled %d, bot-1 %d (resume each stream from your durable cursor)", handled("bot-0", ids), handled("bot-1", ids))
	})
	step("shutdown", 0, func(*progressWait) (bool, string) {
		exitErr, killed := h.eng.term(3 * time.Second)
		switch {
		case killed:
			return false, "no exit within 3s of SIGTERM"
		case exitErr != nil:
			return false, fmt.Sprintf("after SIGTERM the engine exited with %v, not 0", exitErr)
		}
		return true, ""
	})
	return rep, nil
}

// ErrEngineExited is Smoke's error for an engine that exited before any
// step could check it.
var ErrEngineExited = errors.New("the engine exited")

// notReached is the record of a step that the spent budget skipped.
func notReached(name string) SmokeStep {
	return SmokeStep{Step: name, NotReached: true, Took: "0s",
		Detail: fmt.Sprintf("not reached: the check ran into its %s ceiling (fix the first failing step)", SmokeCeiling)}
}

// progressWait is one smoke step's wait: it ends when the step's goal
// holds, or when what the step measures has not moved for quiet (the
// engine stopped making progress), or at the check's ceiling. Each wait
// of a step counts its quiet from its own start; the clock and the sleep
// are fields so that the rule is tested without real time.
type progressWait struct {
	ctx     context.Context
	quiet   time.Duration
	ceiling time.Time
	now     func() time.Time
	sleep   func(context.Context, time.Duration)
	// ended says how the last wait that missed its goal ended.
	ended string
}

// smokePoll is how often a step looks at what it waits for.
const smokePoll = 20 * time.Millisecond

// until polls measure, which returns how far the step has come and
// whether its goal holds, until the goal holds (true) or the wait gives up.
func (w *progressWait) until(measure func() (n int, done bool)) bool {
	w.ended = ""
	last, moved := 0, w.now()
	for first := true; ; first = false {
		n, done := measure()
		if done {
			return true
		}
		now := w.now()
		if first || n != last {
			last, moved = n, now
		}
		switch {
		case w.ctx.Err() != nil:
			w.ended = "interrupted"
			return false
		case !now.Before(w.ceiling):
			w.ended = fmt.Sprintf("the check's %s ceiling passed", SmokeCeiling)
			return false
		case now.Sub(moved) >= w.quiet:
			w.ended = fmt.Sprintf("no progress for %s", w.quiet)
			return false
		}
		w.sleep(w.ctx, smokePoll)
	}
}

// why is the detail's suffix saying how the step's wait gave up.
func (w *progressWait) why() string {
	if w.ended == "" {
		return ""
	}
	return " (" + w.ended + ")"
}

// maxAnswer is the most events one answer of the harness's upstream holds.
const maxAnswer = 500

package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// The cases below are recorded real-time runs, cut down to the one
// message and the kill they turn on (times are offsets from the run's
// start, as the report prints them).

var t0 = time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func params() judgeParams {
	return judgeParams{MaxAttempts: 8, WebhookTimeout: 500 * time.Millisecond, Lease: 3 * time.Second,
		StoreRetry: 200 * time.Millisecond, KillWindow: DefaultKillWindow, HOLBound: 30 * time.Second, Healthy: "bot-0", Settle: time.Minute}
}

// world: one log stream, bot-1 a member, event ev-1 produced at +1s.
func world() *recorder {
	r := newRecorder()
	r.start = t0
	r.mu.Lock()
	r.membershipLocked(streamLog, "bot-1", impl.Position{}, true)
	r.producedLocked(streamLog, true, "ev-1", impl.Position{Major: 79, Minor: 3}, []byte(`{"n":1}`))
	r.events["ev-1"].at = at(1000)
	r.events["ev-1"].served = []time.Time{at(1010)}
	r.mu.Unlock()
	return r
}

func req(r *recorder, sentMs, answeredMs int, outcome string, status int) {
	q := &request{bot: "bot-1", event: "ev-1", at: at(sentMs), outcome: outcome, status: status}
	if answeredMs >= 0 {
		q.answered = at(answeredMs)
	}
	r.requests = append(r.requests, q)
}

func violationsOf(r *recorder, p judgeParams, inv string) []oracle.Violation {
	var out []oracle.Violation
	for _, v := range judge(r, p).violations {
		if v.Invariant == inv {
			out = append(out, v)
		}
	}
	return out
}

// Issue 25 item 2, recorded: the bot's 2xx was written 0.4 ms before the
// SIGKILL; the next incarnation re-sent the message after its restart.
// The answer landed within the kill window, so no completed attempt the
// engine learned of holds it: the re-send is at-least-once, not a replay.
// The same re-send by the same process, long after it learned the 2xx, is.
func TestJudgeKillInstant2xxMayBeResent(t *testing.T) {
	r := world()
	r.handlerRuns[key{"bot-1", "ev-1"}] = 1
	r.firstHandled[key{"bot-1", "ev-1"}] = at(20_100)
	req(r, 20_096, 20_103, outOK, 200)
	r.kills = []kill{{at: at(20_104), reaped: at(20_110), up: at(20_700), planned: true}}
	req(r, 21_250, 21_255, outOK, 200) // incarnation 2 resends after its replay
	if vs := violationsOf(r, params(), oracle.InvIdempotentReplay); len(vs) != 0 {
		t.Errorf("re-send after a 2xx inside the kill window: %v", vs)
	}

	// Planted: no kill between them; the process knew the 2xx for 1.1 s.
	r.kills = nil
	vs := violationsOf(r, params(), oracle.InvIdempotentReplay)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "same engine process sent it again") {
		t.Errorf("a re-send by the process that learned the 2xx: %v; want one idempotent-replay", vs)
	}
	// A 2xx answered well before the kill was learned by the old process,
	// and the new one may still re-send (it did not learn it durably).
	r.kills = []kill{{at: at(21_000), reaped: at(21_005), up: at(21_200), planned: true}}
	if vs := violationsOf(r, params(), oracle.InvIdempotentReplay); len(vs) != 0 {
		t.Errorf("re-send by the next process: %v", vs)
	}
	// A database fault after the 2xx excuses a re-send (the ack may not
	// have committed).
	r.kills = nil
	r.dbFaults = []window{{at(20_500), at(20_500)}}
	if vs := violationsOf(r, params(), oracle.InvIdempotentReplay); len(vs) != 0 {
		t.Errorf("re-send after a database cut: %v", vs)
	}
	// So does the upstream serving the event to the process as a replay
	// (recorded: seed 850, a restart's replay fetched the event 50 ms
	// before the process delivered the earlier process's queued copy, and
	// it sent the replayed copy again 125 ms after that 2xx). Served to
	// the process once, and to no earlier one, is no excuse.
	r.dbFaults = nil
	r.kills = []kill{{at: at(19_500), reaped: at(19_505), up: at(20_000), planned: true}}
	r.events["ev-1"].served = []time.Time{at(1_010), at(20_050)}
	if vs := violationsOf(r, params(), oracle.InvIdempotentReplay); len(vs) != 0 {
		t.Errorf("re-send after a replayed fetch: %v", vs)
	}
	r.events["ev-1"].served = []time.Time{at(20_050)}
	if vs := violationsOf(r, params(), oracle.InvIdempotentReplay); len(vs) != 1 {
		t.Errorf("re-send by a process served the event once: %v; want one idempotent-replay", vs)
	}
}

// Issue 25 item 3, recorded: bot-1 answered 500 to eight attempts; the
// eighth's 500 reached the engine 0.2 s before a SIGKILL, and a ninth
// request went out after the restart. An attempt answered within the kill
// window is not counted (the engine may not have recorded it), so the
// ninth send is the engine's eighth counted attempt. Without the kill the
// ninth send breaks bounded-retry; so does a tenth after the restart.
func TestJudgeKillInstantAttemptNotCounted(t *testing.T) {
	r := world()
	ms := []int{1_100, 1_300, 1_600, 2_100, 3_000, 4_000, 5_000, 6_000}
	for _, m := range ms {
		req(r, m, m+2, outStatus, 500)
	}
	r.kills = []kill{{at: at(6_200), reaped: at(6_210), up: at(6_800), planned: true}}
	req(r, 7_500, 7_502, outStatus, 500) // the ninth request on the wire
	r.dead[key{"bot-1", "ev-1"}] = deadSeen{attempts: 8, at: at(7_600)}
	p := params()
	if vs := violationsOf(r, p, oracle.InvBoundedRetry); len(vs) != 0 {
		t.Errorf("ninth send after the eighth failure landed in the kill window: %v", vs)
	}
	if vs := violationsOf(r, p, oracle.InvNoSilentLoss); len(vs) != 0 {
		t.Errorf("a consistent dead letter counts as a resolution: %v", vs)
	}

	// Planted: no kill, nine sends.
	r.kills = nil
	vs := violationsOf(r, p, oracle.InvBoundedRetry)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "8 failed attempts") {
		t.Errorf("nine sends with eight learned failures: %v; want one bounded-retry", vs)
	}
	// Planted: a tenth send after the restart is over the bound even with
	// the kill.
	r.kills = []kill{{at: at(6_200), reaped: at(6_210), up: at(6_800), planned: true}}
	req(r, 8_500, 8_502, outStatus, 500)
	if vs := violationsOf(r, p, oracle.InvBoundedRetry); len(vs) != 1 {
		t.Errorf("ten sends: %v; want one bounded-retry", vs)
	}
}

// A request in flight at the kill (no answer before the process died) is
// not counted either.
func TestJudgeInFlightAtKillNotCounted(t *testing.T) {
	r := world()
	for i := range 7 {
		req(r, 1_000+i*300, 1_002+i*300, outStatus, 503)
	}
	req(r, 3_500, -1, outNone, 0) // in flight when the kill came
	r.kills = []kill{{at: at(3_501), reaped: at(3_505), up: at(4_000), planned: true}}
	req(r, 4_300, 4_302, outStatus, 503)
	if vs := violationsOf(r, params(), oracle.InvBoundedRetry); len(vs) != 0 {
		t.Errorf("the request in flight at the kill was counted: %v", vs)
	}
}

// Dead letters: reported with fewer attempts than declared, or with
// failures the bots never answered, they are not resolutions.
func TestJudgeDeadLetterConsistency(t *testing.T) {
	r := world()
	for i := range 3 {
		req(r, 1_000+i*300, 1_002+i*300, outStatus, 500)
	}
	r.dead[key{"bot-1", "ev-1"}] = deadSeen{attempts: 3, at: at(2_000)}
	r.atEnd = &protocol.Observation{DeadLetters: []protocol.DeadLetter{{Bot: "bot-1", Event: "ev-1", Attempts: 3}}}
	p := params()
	if vs := violationsOf(r, p, oracle.InvDeadLetterEarned); len(vs) != 1 || !strings.Contains(vs[0].Detail, "fewer than the declared max attempts 8") {
		t.Errorf("dead after 3 of 8: %v", vs)
	}
	vs := violationsOf(r, p, oracle.InvNoSilentLoss)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "3 requests") || !strings.Contains(vs[0].Detail, "reported dead with 3 attempts") {
		t.Errorf("the loss must carry its wire history: %v", vs)
	}
	r.dead[key{"bot-1", "ev-1"}] = deadSeen{attempts: 8, at: at(2_000)}
	if vs := violationsOf(r, p, oracle.InvDeadLetterEarned); len(vs) != 1 || !strings.Contains(vs[0].Detail, "saw only 3 requests") {
		t.Errorf("dead with 8 attempts, 3 failures seen: %v", vs)
	}
	// A refusing bot sees each connection it refuses (bots.go, refuse):
	// five refused attempts make up the eight.
	for i := range 5 {
		req(r, 2_000+i*300, 2_001+i*300, outReset, 0)
	}
	if vs := violationsOf(r, p, oracle.InvDeadLetterEarned); len(vs) != 0 {
		t.Errorf("three 500s and five refused connections, dead with 8: %v", vs)
	}
}

// Key publication and membership: a send before the key, or to a bot that
// is not a member at the event's position, or with another body.
func TestJudgeKeyMembershipAndBody(t *testing.T) {
	r := world()
	r.keyless["bot-1"] = true
	r.keyAt["bot-1"] = at(5_000)
	req(r, 4_000, 4_002, outOK, 200)
	if vs := violationsOf(r, params(), InvKeyHeld); len(vs) != 1 {
		t.Errorf("a send before the key: %v", vs)
	}
	r.requests[0].at, r.requests[0].answered = at(5_100), at(5_102)
	if vs := violationsOf(r, params(), InvKeyHeld); len(vs) != 0 {
		t.Errorf("a send after the key: %v", vs)
	}
	r.streams[streamLog] = append(r.streams[streamLog], memb{bot: "bot-1", from: impl.Position{Major: 79}, member: false})
	if vs := violationsOf(r, params(), oracle.InvNoPhantomDelivery); len(vs) != 1 || !strings.Contains(vs[0].Detail, "not a member") {
		t.Errorf("a send to a bot that left before the event: %v", vs)
	}
	r.streams[streamLog] = r.streams[streamLog][:1]
	r.requests[0].phantom = "its body (3 bytes) differs from the event's payload (7 bytes)"
	if vs := violationsOf(r, params(), oracle.InvNoPhantomDelivery); len(vs) != 1 {
		t.Errorf("a re-serialised body: %v", vs)
	}
}

// A loss names what the wire saw, and an unfetched event says so.
func TestJudgeLossHistory(t *testing.T) {
	r := world()
	r.events["ev-1"].served = nil
	vs := violationsOf(r, params(), oracle.InvNoSilentLoss)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "never fetched") || !strings.Contains(vs[0].Detail, "never sent") {
		t.Errorf("loss of an unfetched event: %v", vs)
	}
}

// An engine that reports no dead letters is taken at the wire's word: max
// attempts failures answered since the last 2xx, then silence, is the
// protocol's dead letter; one failure fewer is a loss.
func TestJudgeDeadLetterFromTheWire(t *testing.T) {
	r := world()
	for i := range 8 {
		req(r, 1_000+i*300, 1_002+i*300, outStatus, 503)
	}
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 0 {
		t.Errorf("eight 503s, then no more sends, no observation endpoint: %v", vs)
	}
	r.requests = r.requests[:7]
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 1 {
		t.Errorf("seven 503s, then silence: %v; want a loss", vs)
	}
	// An engine that reports dead letters must list it.
	r.requests = r.requests[:0]
	for i := range 8 {
		req(r, 1_000+i*300, 1_002+i*300, outStatus, 503)
	}
	r.atEnd = &protocol.Observation{DeadLetters: []protocol.DeadLetter{}}
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 1 {
		t.Errorf("eight 503s but the engine's dead letters do not list it: %v; want a loss", vs)
	}
}

// A permanent status (impl.PermanentStatus) may be dead-lettered at once
// (PROTOCOL.md, Webhooks), as the reference engine does; a transient one may
// not. Either way the dead letter must be reported, or evident on the wire.
func TestJudgePermanentStatusDeadLettersAtOnce(t *testing.T) {
	for _, c := range []struct {
		status    int
		permanent bool
	}{{400, true}, {410, true}, {422, true}, {429, false}, {503, false}, {401, false}} {
		r := world()
		req(r, 1_000, 1_002, outStatus, c.status)
		wantLoss := 1
		if c.permanent {
			wantLoss = 0
		}
		// No observation endpoint: one answer, then silence.
		if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != wantLoss {
			t.Errorf("one %d, then silence, no endpoint: %d losses %v; want %d", c.status, len(vs), vs, wantLoss)
		}
		// Reported dead with 1 attempt.
		r.dead[key{"bot-1", "ev-1"}] = deadSeen{attempts: 1, at: at(2_000)}
		r.atEnd = &protocol.Observation{DeadLetters: []protocol.DeadLetter{{Bot: "bot-1", Event: "ev-1", Attempts: 1}}}
		if vs := violationsOf(r, params(), oracle.InvDeadLetterEarned); len(vs) != wantLoss {
			t.Errorf("one %d, reported dead after 1 attempt: %v; want %d violations", c.status, vs, wantLoss)
		}
		if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != wantLoss {
			t.Errorf("one %d, reported dead after 1 attempt: %d losses %v; want %d", c.status, len(vs), vs, wantLoss)
		}
	}
	// The last answer decides: a 400 followed by a 503 is not permanent.
	r := world()
	req(r, 1_000, 1_002, outStatus, 400)
	req(r, 1_300, 1_302, outStatus, 503)
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 1 {
		t.Errorf("a 400 then a 503, then silence: %v; want a loss", vs)
	}
}

// A failure answered just before a database cut may never have been
// recorded (the engine's write of it was cut): not counted either. Without
// the cut, the ninth send breaks bounded-retry.
func TestJudgeAttemptBeforeDatabaseCutNotCounted(t *testing.T) {
	r := world()
	for i := range 8 {
		req(r, 1_000+i*400, 1_002+i*400, outStatus, 500)
	}
	r.dbFaults = []window{{at(4_100), at(4_100)}} // 300 ms after the eighth answer
	req(r, 6_000, 6_002, outStatus, 500)
	if vs := violationsOf(r, params(), oracle.InvBoundedRetry); len(vs) != 0 {
		t.Errorf("ninth send after a failure cut off from its record: %v", vs)
	}
	r.dbFaults = nil
	if vs := violationsOf(r, params(), oracle.InvBoundedRetry); len(vs) != 1 {
		t.Errorf("ninth send with no fault: %v; want one bounded-retry", vs)
	}
}

// Each database fault excuses one failure of a message, not all failures
// near it: an engine that retries for ever across cuts still breaks the
// bound (the pyengine's retry-forever variant, a 15 s run with three cuts,
// once passed bounded-retry when every failure near a cut was excused).
func TestJudgeRetryForeverAcrossCuts(t *testing.T) {
	r := world()
	for i := range 14 {
		req(r, 1_000+i*600, 1_002+i*600, outStatus, 400)
	}
	r.dbFaults = []window{{at(2_000), at(2_000)}, {at(4_500), at(4_500)}, {at(7_000), at(7_000)}}
	if vs := violationsOf(r, params(), oracle.InvBoundedRetry); len(vs) != 1 {
		t.Errorf("fourteen sends across three cuts: %v; want one bounded-retry", vs)
	}
	r.requests = r.requests[:11] // 8 counted + 3 excused: the eleventh is allowed
	if vs := violationsOf(r, params(), oracle.InvBoundedRetry); len(vs) != 0 {
		t.Errorf("eleven sends across three cuts: %v", vs)
	}
}

package chaos

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// wparams are params with the reference's declared settings under chaos:
// initial backoff 100 ms (x2, max 1 s), 8 in flight per bot, breaker
// after 5 failures open for 1 s, lookback 5 s.
func wparams() judgeParams {
	p := params()
	p.Declared, p.Breaker = ReferenceEngine(), true
	return p
}

// The same process re-sends a message 49 ms after the bot answered 503:
// below the 100 ms backoff. At 150 ms it is not; after a kill, a
// database fault, or the upstream serving the event again, the re-send
// has a cause the rule does not judge.
func TestRetryBackoffFromTheWire(t *testing.T) {
	r := world()
	req(r, 2000, 2001, outStatus, 503)
	req(r, 2050, 2051, outOK, 200)
	vs := violationsOf(r, wparams(), oracle.InvRetryBackoff)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "below the declared backoff 100ms") {
		t.Fatalf("a retry 49 ms after a 503: %v; want one retry-backoff", vs)
	}

	r.requests[1].at, r.requests[1].answered = at(2151), at(2152)
	if vs := violationsOf(r, wparams(), oracle.InvRetryBackoff); len(vs) != 0 {
		t.Errorf("a retry 150 ms after a 503: %v", vs)
	}

	// The backoff runs from when the bot began writing its answer: the
	// time read after the flush can be late on a loaded machine (a
	// correct Python engine, at load 18, retried 70 ms after a recorded
	// answer whose write had begun earlier).
	r = world()
	req(r, 2000, 2060, outStatus, 408)
	req(r, 2130, 2131, outOK, 200)
	r.requests[0].writing = at(2020)
	if vs := violationsOf(r, wparams(), oracle.InvRetryBackoff); len(vs) != 0 {
		t.Errorf("a retry 110 ms after the answer began, 70 ms after it was recorded: %v", vs)
	}
	r.requests[1].at = at(2100)
	if vs := violationsOf(r, wparams(), oracle.InvRetryBackoff); len(vs) != 1 {
		t.Errorf("a retry 80 ms after the answer began: %v; want one retry-backoff", vs)
	}

	// The second failure's backoff is 200 ms: a retry 150 ms after it fails.
	r = world()
	req(r, 2000, 2001, outStatus, 503)
	req(r, 2151, 2152, outStatus, 503)
	req(r, 2302, 2303, outOK, 200)
	vs = violationsOf(r, wparams(), oracle.InvRetryBackoff)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "200ms") {
		t.Errorf("a retry 150 ms after the second 503: %v; want one retry-backoff against 200ms", vs)
	}

	for name, excuse := range map[string]func(r *recorder){
		"kill":     func(r *recorder) { r.kills = []kill{{at: at(2010), reaped: at(2012), up: at(2040), planned: true}} },
		"db fault": func(r *recorder) { r.dbFaults = []window{{at(2005), at(2005)}} },
		"served again": func(r *recorder) {
			r.events["ev-1"].served = append(r.events["ev-1"].served, at(2030))
		},
	} {
		r := world()
		req(r, 2000, 2001, outStatus, 503)
		req(r, 2050, 2051, outOK, 200)
		excuse(r)
		if vs := violationsOf(r, wparams(), oracle.InvRetryBackoff); len(vs) != 0 {
			t.Errorf("%s between the failure and the retry: %v", name, vs)
		}
	}

	// A timeout is timed from the engine's send, which the bot does not
	// see: no spacing is judged from it.
	r = world()
	req(r, 2000, 2500, outTimeout, 0)
	req(r, 2520, 2521, outOK, 200)
	if vs := violationsOf(r, wparams(), oracle.InvRetryBackoff); len(vs) != 0 {
		t.Errorf("a retry after a timeout: %v", vs)
	}
}

func reqTo(r *recorder, bot, event string, sentMs, answeredMs int, outcome string, status int) {
	if r.events[event] == nil {
		r.producedLocked(streamLog, true, event, impl.Position{Major: 79, Minor: int64(len(r.order) + 3)}, []byte(`{"n":1}`))
		r.events[event].at = at(sentMs - 10)
	}
	q := &request{bot: bot, event: event, at: at(sentMs), outcome: outcome, status: status}
	if answeredMs >= 0 {
		q.answered = at(answeredMs)
	}
	r.requests = append(r.requests, q)
}

// Three requests open at one bot at once exceed a declared limit of 2;
// a request counts for at most half the webhook timeout after the bot
// received it, and requests of different processes never add up.
func TestInFlightFromTheWire(t *testing.T) {
	p := wparams()
	p.Declared.MaxInFlightPerBot = 2
	r := world()
	reqTo(r, "bot-1", "a", 1000, 1200, outOK, 200)
	reqTo(r, "bot-1", "b", 1010, 1200, outOK, 200)
	reqTo(r, "bot-1", "c", 1020, 1030, outOK, 200)
	vs := violationsOf(r, p, oracle.InvInFlightLimit)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "3 requests") {
		t.Fatalf("three open at once: %v; want one in-flight-limit", vs)
	}
	// The third arrives as the first is answered: a slot freed and taken.
	r.requests[2].at, r.requests[2].answered = at(1200), at(1210)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 0 {
		t.Errorf("two open at once: %v", vs)
	}
	// A timed-out request (500 ms) counts until +250 ms: the engine's
	// timer started before the bot saw the request, by a transit that a
	// loaded machine stretches.
	r = world()
	reqTo(r, "bot-1", "a", 1000, 1500, outTimeout, 0)
	reqTo(r, "bot-1", "b", 1010, 1500, outTimeout, 0)
	reqTo(r, "bot-1", "c", 1390, 1400, outOK, 200)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 0 {
		t.Errorf("a request 380 ms after two that timed out (a 390 ms transit may have freed their slots): %v", vs)
	}
	r.requests[2].at = at(1240)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 1 {
		t.Errorf("a request within half the timeout of two open ones: %v; want one", vs)
	}
	// The same for a request the bot answered late (a 2xx after 450 ms):
	// it counts for half the timeout, not until its answer.
	r = world()
	reqTo(r, "bot-1", "a", 1000, 1450, outOK, 200)
	reqTo(r, "bot-1", "b", 1010, 1450, outOK, 200)
	reqTo(r, "bot-1", "c", 1300, 1310, outOK, 200)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 0 {
		t.Errorf("late answers counted past half the timeout: %v", vs)
	}
	r.requests[2].at, r.requests[2].answered = at(1200), at(1210)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 1 {
		t.Errorf("a request within half the timeout of two late-answered ones: %v; want one", vs)
	}
	// Across a kill: the old process's requests are not the new one's.
	r.kills = []kill{{at: at(1100), reaped: at(1101), up: at(1150), planned: true}}
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 0 {
		t.Errorf("requests of two processes: %v", vs)
	}

	// A request ends where the bot began writing its answer: the time read
	// after the flush can be late on a loaded machine, and a correct
	// Node.js engine sent its next request in between (4 of 9 loaded runs).
	r = world()
	reqTo(r, "bot-1", "a", 1000, 1100, outOK, 200)
	reqTo(r, "bot-1", "b", 1010, 1100, outOK, 200)
	reqTo(r, "bot-1", "c", 1070, 1080, outOK, 200)
	r.requests[0].writing = at(1050)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 0 {
		t.Errorf("a request after an answer began but before it was recorded: %v", vs)
	}
	r.requests[0].writing = at(1090)
	if vs := violationsOf(r, p, oracle.InvInFlightLimit); len(vs) != 1 {
		t.Errorf("a request before an answer began: %v; want one", vs)
	}
}

// resumeWorld: log-1 events at (79,1..3) served before a kill at +5 s;
// the endpoint showed the cursor at (79,2) at +4 s; one event (80,0)
// produced while the engine was down.
func resumeWorld() *recorder {
	r := newRecorder()
	r.start = t0
	r.mu.Lock()
	defer r.mu.Unlock()
	r.membershipLocked(streamLog, "bot-1", impl.Position{}, true)
	for i, id := range []string{"e1", "e2", "e3"} {
		r.producedLocked(streamLog, true, id, impl.Position{Major: 79, Minor: int64(i + 1)}, nil)
		r.events[id].at, r.events[id].served = at(1000*(i+1)), []time.Time{at(1000*(i+1) + 5)}
	}
	r.producedLocked(streamLog, true, "e4", impl.Position{Major: 80}, nil)
	r.events["e4"].at = at(5200)
	r.kills = []kill{{at: at(5000), reaped: at(5010), up: at(5500), planned: true}}
	r.cursorReads = []cursorRead{{at: at(4000), cursors: []protocol.ObservedCursor{{Stream: streamLog, Pos: protocol.FromPos(impl.Position{Major: 79, Minor: 2})}}}}
	return r
}

func fetchAt(r *recorder, ms int, q string) {
	v, err := url.ParseQuery(q)
	if err != nil {
		panic(err)
	}
	r.fetched(streamLog, v)
	r.fetches[len(r.fetches)-1].at = at(ms)
}

func TestResumeFromCursorFromTheWire(t *testing.T) {
	for _, c := range []struct {
		name, query string
		want        string // "" = no violation
	}{
		{"at the observed cursor", "after=79.2", ""},
		{"at the last served event", "after=79.3", ""},
		{"behind the observed cursor", "after=79.1", "behind the durable cursor (79,2)"},
		{"from the start", "after=0.0", "behind the durable cursor (79,2)"},
		{"past every served event", "after=80.0", "past (79,3)"},
		{"from the head", "from=head", "skipping e4"},
	} {
		r := resumeWorld()
		fetchAt(r, 5600, c.query)
		fetchAt(r, 5700, "next=4") // a continuation is no opening fetch
		vs := violationsOf(r, wparams(), oracle.InvResumeFromCursor)
		switch {
		case c.want == "" && len(vs) != 0:
			t.Errorf("%s: %v", c.name, vs)
		case c.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].Detail, c.want)):
			t.Errorf("%s: %v; want one resume-from-cursor saying %q", c.name, vs, c.want)
		}
	}
	// A backfill from behind beside the resume: the highest start is the resume.
	r := resumeWorld()
	fetchAt(r, 5600, "after=10.0")
	fetchAt(r, 5610, "after=79.2")
	if vs := violationsOf(r, wparams(), oracle.InvResumeFromCursor); len(vs) != 0 {
		t.Errorf("a backfill beside the resume: %v", vs)
	}
	// A backfill pending at the kill (bot-2 joined from (79,1), behind the
	// cursor, when (79,2) and (79,3) were already produced): a resume from
	// its start is not behind; one from before it is.
	r = resumeWorld()
	r.membershipLocked(streamLog, "bot-2", impl.Position{Major: 79, Minor: 1}, true)
	r.streams[streamLog][len(r.streams[streamLog])-1].at = at(4500)
	fetchAt(r, 5600, "after=79.1")
	if vs := violationsOf(r, wparams(), oracle.InvResumeFromCursor); len(vs) != 0 {
		t.Errorf("a resume from a pending backfill's start: %v", vs)
	}
	r.fetches = nil
	fetchAt(r, 5600, "after=79.0")
	if vs := violationsOf(r, wparams(), oracle.InvResumeFromCursor); len(vs) != 1 {
		t.Errorf("a resume behind a pending backfill's start: %v; want one", vs)
	}
	r = resumeWorld()
	fetchAt(r, 5600, "after=10.0")
	fetchAt(r, 5610, "after=79.2")
	// A later subscription, after the process was served new events, is
	// not its resume.
	r.events["e4"].served = []time.Time{at(5620)}
	fetchAt(r, 6000, "after=80.0")
	if vs := violationsOf(r, wparams(), oracle.InvResumeFromCursor); len(vs) != 0 {
		t.Errorf("a subscription after new events: %v", vs)
	}
}

func TestReportedCountersFromTheWire(t *testing.T) {
	r := world()
	req(r, 1000, 1001, outOK, 200)
	req(r, 1100, 1101, outOK, 200)
	r.scrapeReads = []scrape{{at: at(1500), acked: 2, sent: 2}}
	if vs := violationsOf(r, wparams(), oracle.InvReportedCounters); len(vs) != 0 {
		t.Errorf("counters equal to the wire: %v", vs)
	}
	r.scrapeReads = append(r.scrapeReads, scrape{at: at(2500), acked: 4, sent: 2})
	vs := violationsOf(r, wparams(), oracle.InvReportedCounters)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "above the 2 2xx answers") {
		t.Errorf("acked above the 2xx answers: %v; want one", vs)
	}
	// After the heal the last process must count what it sent (older than
	// the slack).
	r = world()
	r.healAt = at(900)
	req(r, 1000, 1001, outOK, 200)
	req(r, 1100, 1101, outOK, 200)
	r.finalScrape = scrape{at: at(3000), acked: 1, sent: 1}
	vs = violationsOf(r, wparams(), oracle.InvReportedCounters)
	if len(vs) != 2 {
		t.Errorf("counters behind the wire after the heal: %v; want two (sent, acked)", vs)
	}
	r.finalScrape.at = at(1500) // both within the slack of the reading
	if vs := violationsOf(r, wparams(), oracle.InvReportedCounters); len(vs) != 0 {
		t.Errorf("counters behind the wire only within the slack: %v", vs)
	}
}

// Five 503s in a row, then three requests within the open period: two
// too many. One (a probe) is allowed; a 2xx meanwhile ends the row.
func TestBreakerPolicyFromTheWire(t *testing.T) {
	build := func(extra ...int) *recorder {
		r := world()
		for i := range 5 {
			reqTo(r, "bot-1", "f"+string(rune('a'+i)), 1000+10*i, 1001+10*i, outStatus, 503)
		}
		for i, ms := range extra {
			reqTo(r, "bot-1", "x"+string(rune('a'+i)), ms, ms+1, outStatus, 503)
		}
		return r
	}
	vs := violationsOf(build(1600, 1700, 1800), wparams(), oracle.InvBreakerPolicy)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "3 requests") {
		t.Fatalf("three sends while the breaker must be open: %v; want one breaker-policy", vs)
	}
	if vs := violationsOf(build(1700), wparams(), oracle.InvBreakerPolicy); len(vs) != 0 {
		t.Errorf("one probe: %v", vs)
	}
	// Within the learn slack of the fifth failure (half the 1 s open
	// period): the engine may not have read it yet. A process descheduled
	// for 450 ms after the answer sends what it had queued (a fixed 300 ms
	// slack failed it).
	if vs := violationsOf(build(1100, 1200, 1300, 1391, 1461), wparams(), oracle.InvBreakerPolicy); len(vs) != 0 {
		t.Errorf("sends within the learn slack: %v", vs)
	}
	// The window is timed from when the bot began writing the answer, not
	// from the time read after its flush (late on a loaded machine): the
	// fifth failure written at 1041, recorded at 1441.
	r := build()
	r.requests[4].writing, r.requests[4].answered = at(1041), at(1441)
	for i, ms := range []int{1600, 1700, 1800} {
		reqTo(r, "bot-1", "w"+string(rune('a'+i)), ms, ms+1, outStatus, 503)
	}
	if vs := violationsOf(r, wparams(), oracle.InvBreakerPolicy); len(vs) != 1 {
		t.Errorf("three sends 560 to 760 ms after the bot began writing the fifth failure: %v; want one", vs)
	}
	r = build(1600, 1700, 1800)
	reqTo(r, "bot-1", "ok", 1020, 1025, outOK, 200)
	if vs := violationsOf(r, wparams(), oracle.InvBreakerPolicy); len(vs) != 0 {
		t.Errorf("a 2xx inside the row: %v", vs)
	}
	// A 2xx written 100 ms before the row: its first failures may be read
	// before it, so they do not count; the row then needs five more.
	r = build(1600, 1700, 1800)
	reqTo(r, "bot-1", "ok", 895, 900, outOK, 200)
	if vs := violationsOf(r, wparams(), oracle.InvBreakerPolicy); len(vs) != 0 {
		t.Errorf("a row begun within the read slack of a 2xx: %v", vs)
	}
	r = build()
	reqTo(r, "bot-1", "ok", 495, 500, outOK, 200) // 501 ms before the row: it counts
	for i, ms := range []int{1600, 1700, 1800} {
		reqTo(r, "bot-1", "y"+string(rune('a'+i)), ms, ms+1, outStatus, 503)
	}
	if vs := violationsOf(r, wparams(), oracle.InvBreakerPolicy); len(vs) != 1 {
		t.Errorf("a row begun after the read slack of a 2xx: %v; want one", vs)
	}
	p := wparams()
	p.Breaker = false
	for _, v := range judge(build(1600, 1700, 1800), p).verdicts {
		if v.Invariant == oracle.InvBreakerPolicy && v.Verdict != notJudged {
			t.Errorf("an engine that declares no breaker: %v, want not judged", v)
		}
	}
	p = wparams()
	p.Declared.BreakerOpenFor = 200 * time.Millisecond
	for _, v := range judge(build(1600, 1700, 1800), p).verdicts {
		if v.Invariant == oracle.InvBreakerPolicy && v.Verdict != notJudged {
			t.Errorf("an open period shorter than the slacks: %v, want not judged", v)
		}
	}
}

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// Issue 37, false FAIL 1 (5 of 8 runs of the Python engine): a message
// whose last answer was a permanent 400, dead-lettered at once by an
// engine without /v1/observe. The settle held it open until its bound and
// liveness then failed with "0 obligations were still open", because the
// settle's rule did not know what the judge's did.
func TestPermanentLastAnswerResolvesForSettleAndJudge(t *testing.T) {
	r := world()
	req(r, 1_000, 1_002, outStatus, 400)
	p := params()
	if _, open := r.outstanding(p); open != 0 {
		t.Errorf("the settle counts %d open after a permanent 400", open)
	}
	if !r.settled(p) {
		t.Errorf("the settle does not end after a permanent 400: open %v", r.settleOpen)
	}
	for _, inv := range []string{oracle.InvLiveness, oracle.InvNoSilentLoss} {
		if vs := violationsOf(r, p, inv); len(vs) != 0 {
			t.Errorf("%s after a permanent 400: %v", inv, vs)
		}
	}
	// Planted: a 503 after it is the last answer, and transient.
	req(r, 1_300, 1_302, outStatus, 503)
	if r.settled(p) {
		t.Error("the settle ends with a 503 as the last of two answers")
	}
	vs := violationsOf(r, p, oracle.InvLiveness)
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "1 obligations were still open") || !strings.Contains(vs[0].Detail, "ev-1→bot-1") {
		t.Errorf("liveness with one message open at the settle's end: %v", vs)
	}
}

// signedPost sends one signed webhook to b as an engine would, on a
// connection of its own.
func signedPost(ctx context.Context, b *bot, id string) (*http.Response, error) {
	ts := time.Now().Unix()
	const body = "{}"
	rq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url(), strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	rq.Header.Set("webhook-id", id)
	rq.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	rq.Header.Set("webhook-signature", webhook.Sign(b.secret, id, ts, []byte(body)))
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return c.Do(rq)
}

func recorded(b *bot) []request {
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	out := make([]request, len(b.rec.requests))
	for i, q := range b.rec.requests {
		out[i] = *q
	}
	return out
}

// waitRecorded polls until n requests reached b (not a timed assertion:
// the test waits for the event, however long it takes).
func waitRecorded(b *bot, n int) {
	for len(recorded(b)) < n {
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAnswered polls until the i-th request reached has an outcome.
func waitAnswered(b *bot, i int) {
	for recorded(b)[i].outcome == outNone {
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 37, false FAIL 2: a refusing bot closed its listener, so refused
// connections were attempts nobody saw, and an engine without /v1/observe
// that dead-lettered after them was judged to have lost the message. Now
// the bot accepts, reads and resets: the engine gets a failed connection,
// the harness one failed attempt for that message.
func TestRefusedConnectionIsACountedAttempt(t *testing.T) {
	b, err := newBot("bot-1", []byte("0123456789abcdef0123"), newRecorder(), 500*time.Millisecond, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	b.setMode(modeRefuse)
	for i := range 2 {
		resp, err := signedPost(context.Background(), b, "ev-1")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("attempt %d: a refusing bot answered %d", i, resp.StatusCode)
		}
	}
	got := recorded(b)
	if len(got) != 2 || got[0].event != "ev-1" || got[0].outcome != outReset || got[1].outcome != outReset {
		t.Fatalf("two refused attempts recorded as %+v; want two %q for ev-1", got, outReset)
	}
	b.setMode(modeHealthy)
	resp, err := signedPost(context.Background(), b, "ev-1")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the refuse window: %v", err)
	}
	resp.Body.Close()

	// The judge: eight refused attempts, then silence, from an engine
	// with no endpoint is the protocol's dead letter; seven is a loss.
	r := world()
	for i := range 8 {
		req(r, 1_000+i*300, 1_001+i*300, outReset, 0)
	}
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 0 {
		t.Errorf("eight refused attempts, then silence: %v", vs)
	}
	r.requests = r.requests[:7]
	if vs := violationsOf(r, params(), oracle.InvNoSilentLoss); len(vs) != 1 || !strings.Contains(vs[0].Detail, "7 requests: +1.000s→refused") {
		t.Errorf("seven refused attempts, then silence: %v; want a loss showing them", vs)
	}
}

// Issue 37, false FAIL 3: a slow answer cut off by the bot starting to
// refuse (its listener closed) was recorded as a 2xx the engine never got,
// and the engine's correct re-send was judged a replay. An answer is
// recorded as given only when it reached a live connection.
func TestAnswerCountsOnlyIfItReachedTheEngine(t *testing.T) {
	b, err := newBot("bot-1", []byte("0123456789abcdef0123"), newRecorder(), 5*time.Second, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	b.setMode(modeSlow)
	got := make(chan error, 1)
	go func() {
		resp, err := signedPost(context.Background(), b, "ev-1")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		got <- err
	}()
	waitRecorded(b, 1)
	b.setMode(modeRefuse) // while the slow answer waits
	err = <-got
	// The bot records an answer once it is flushed, which may be just
	// after the engine read it.
	waitAnswered(b, 0)
	if q := recorded(b)[0]; (err == nil) != (q.outcome == outOK) {
		t.Errorf("the engine got %v; the bot recorded %q", err, q.outcome)
	}

	// The engine hangs up (its own timeout) while the slow answer waits:
	// no answer reached it, and none is recorded as given.
	b.setMode(modeSlow)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		resp, err := signedPost(ctx, b, "ev-2")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	waitRecorded(b, 2)
	cancel()
	if err := <-got; err == nil {
		t.Fatal("a canceled request got an answer")
	}
	waitAnswered(b, 1) // the handler finishes its wait
	if q := recorded(b)[1]; q.outcome != outDropped {
		t.Errorf("an answer to an engine that hung up recorded as %q; want %q", q.outcome, outDropped)
	}
}

// The settle and the judge cannot disagree: over generated histories
// (answers of every kind, late 2xx, kills, handler runs, dead letters
// listed or not), the settle ends exactly when no-silent-loss has nothing
// to say, liveness fails exactly when it did not and names as many
// obligations as it left open, and the report's delivered + dead-lettered
// + lost is every obligation.
func TestSettleAndJudgeAgree(t *testing.T) {
	outcomes := []string{outOK, outStatus, outTimeout, outRejected, outReset, outDropped, outNone}
	statuses := []int{400, 404, 410, 422, 408, 429, 500, 503}
	rapid.Check(t, func(t *rapid.T) {
		eng := ReferenceEngine()
		eng.MaxAttempts = rapid.IntRange(1, 8).Draw(t, "max")
		h := &harness{cfg: Config{Duration: time.Minute, Settle: time.Minute, Engine: eng, KillWindow: DefaultKillWindow}, rec: newRecorder()}
		r := h.rec
		r.start = t0
		r.mu.Lock()
		bots := []string{"bot-1", "bot-2"}
		for _, b := range bots {
			r.membershipLocked(streamLog, b, impl.Position{}, true)
		}
		nev := rapid.IntRange(1, 3).Draw(t, "events")
		for i := range nev {
			id := fmt.Sprintf("ev-%d", i)
			r.producedLocked(streamLog, true, id, impl.Position{Major: int64(i + 1)}, []byte("{}"))
			r.events[id].at = at(i * 100)
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "kills") {
			k := rapid.IntRange(0, 20_000).Draw(t, fmt.Sprint("kill", i))
			r.kills = append(r.kills, kill{at: at(k), reaped: at(k + 5), up: at(k + 300), planned: true})
		}
		r.exposes = rapid.Bool().Draw(t, "exposes")
		for i := range nev {
			id := fmt.Sprintf("ev-%d", i)
			for _, b := range bots {
				k := key{b, id}
				ms := 1_000
				for j := range rapid.IntRange(0, 10).Draw(t, "n") {
					ms += rapid.IntRange(1, 2_000).Draw(t, "gap")
					o := rapid.SampledFrom(outcomes).Draw(t, "outcome")
					q := &request{bot: b, event: id, at: at(ms), outcome: o}
					if o != outNone {
						q.answered = at(ms + rapid.IntRange(0, 1_000).Draw(t, "took"))
					}
					if o == outStatus {
						q.status = rapid.SampledFrom(statuses).Draw(t, "status")
					}
					r.requests = append(r.requests, q)
					if (o == outOK || o == outTimeout) && rapid.Bool().Draw(t, fmt.Sprint("ran", j)) {
						if _, ok := r.firstHandled[k]; !ok {
							r.firstHandled[k] = q.at
						}
						r.handlerRuns[k]++
					}
				}
				if r.exposes && rapid.Bool().Draw(t, "listed") {
					r.dead[k] = deadSeen{attempts: rapid.IntRange(0, 10).Draw(t, "attempts"), at: at(ms + 1)}
				}
			}
		}
		r.mu.Unlock()

		p := h.judgeParams()
		quiet := r.settled(p)
		_, open := r.outstanding(p)
		r.mu.Lock()
		losses := len(violationsOf(r, p, oracle.InvNoSilentLoss))
		live := violationsOf(r, p, oracle.InvLiveness)
		r.mu.Unlock()
		if quiet != (open == 0) || quiet != (losses == 0) {
			t.Fatalf("the settle says quiet %v (open %d), the judge finds %d losses", quiet, open, losses)
		}
		if quiet != (len(live) == 0) || (!quiet && !strings.HasPrefix(live[0].Detail, fmt.Sprintf("%d obligations were still open", open))) {
			t.Fatalf("quiet %v with %d open; liveness %v", quiet, open, live)
		}
		rep := h.report(nil, faultCounts{}, 0, quiet, 0, nil, false)
		if rep.Delivered+rep.DeadLetter+rep.Lost != rep.Owed || rep.Lost != losses {
			t.Fatalf("report: delivered %d + dead %d + lost %d of %d owed (judge: %d losses)", rep.Delivered, rep.DeadLetter, rep.Lost, rep.Owed, losses)
		}
	})
}

// The settle gives up on a stall, not on a total: a loaded machine that
// slows a correct engine keeps it waiting while obligations still
// resolve, and an engine that stops resolving is let go after Settle.
func TestSettleGivesUpOnAStallNotOnATotal(t *testing.T) {
	const s = 10 * time.Second
	for _, c := range []struct {
		sinceHeal, sinceProgress time.Duration
		over                     bool
	}{
		{sinceHeal: 3 * s, sinceProgress: s / 2, over: false}, // slow but resolving
		{sinceHeal: s + 1, sinceProgress: s + 1, over: true},  // nothing resolved since the heal
		{sinceHeal: 2 * s, sinceProgress: s + 1, over: true},  // stalled after some progress
		{sinceHeal: settleCapFactor*s + 1, sinceProgress: 0, over: true},
	} {
		if why := settleOver(c.sinceHeal, c.sinceProgress, s); (why != "") != c.over {
			t.Errorf("settleOver(%s since the heal, %s since progress) = %q; want over=%v", c.sinceHeal, c.sinceProgress, why, c.over)
		}
	}
}

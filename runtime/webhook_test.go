package runtime

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// webhookRig is a loop with just what deliver needs: a bot on 127.0.0.1
// that counts the requests it read, and a transport whose first
// stalledDials dials never connect (they end when the request gives up),
// as when this process is descheduled past the webhook timeout before it
// could dial. No step waits on the clock's speed: a stalled dial ends at
// the request's own deadline.
type webhookRig struct {
	l    *loop
	read atomic.Int32 // requests the bot read in full
	dial atomic.Int32
}

func newWebhookRig(t *testing.T, stalledDials int32, handler func(http.ResponseWriter, *http.Request)) (*webhookRig, string) {
	t.Helper()
	r := &webhookRig{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		buf := make([]byte, 1<<16)
		for {
			if _, err := q.Body.Read(buf); err != nil {
				break
			}
		}
		r.read.Add(1)
		handler(w, q)
	}))
	t.Cleanup(srv.Close)
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if r.dial.Add(1) <= stalledDials {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := engine.DefaultConfig()
	cfg.WebhookTimeout, cfg.Lease = 50*time.Millisecond, time.Minute
	r.l = &loop{o: Options{Engine: cfg}, m: NewMetrics(), sendCtx: ctx, webhook: &http.Client{Transport: tr}}
	return r, srv.URL
}

func send() engine.Send {
	return engine.Send{RequestID: 7, Bot: "bot-1", EventID: "ev-1", Body: []byte(`{"x":1}`), Timestamp: 1}
}

// A request that never left the process is sent again and not reported:
// the bot reads one request, and the engine learns that request's 2xx.
// Without the resend the engine counted a timeout no bot ever saw (issue
// 38: dead-letter-earned false-FAILed the reference at double load).
func TestDeliverResendsWhatNeverLeftTheProcess(t *testing.T) {
	r, u := newWebhookRig(t, 2, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	res := r.l.deliver(send(), u)
	if res.Outcome != engine.OutcomeOK {
		t.Fatalf("outcome %v after two dials that never connected; want OK from the third (the bot read %d requests)", res.Outcome, r.read.Load())
	}
	if got := r.read.Load(); got != 1 {
		t.Fatalf("the bot read %d requests; want 1", got)
	}
	if got := counterValue(t, r.l); got != 2 {
		t.Fatalf("deliverysim_webhook_unwritten_total = %v; want 2", got)
	}
}

// A request written whole is an attempt: its timeout is reported, and it
// is not sent again (the bot read it, and may have handled it).
func TestDeliverReportsTheTimeoutOfAWrittenRequest(t *testing.T) {
	r, u := newWebhookRig(t, 0, func(_ http.ResponseWriter, q *http.Request) { <-q.Context().Done() })
	res := r.l.deliver(send(), u)
	if res.Outcome != engine.OutcomeTimeout {
		t.Fatalf("outcome %v; want a timeout", res.Outcome)
	}
	if got := r.read.Load(); got != 1 {
		t.Fatalf("the bot read %d requests; want 1 (a written request is never resent by the runtime)", got)
	}
}

// The resends are bounded: a bot no dial ever reaches fails the attempt
// once noWireFor has passed.
func TestDeliverGivesUpOnADialThatNeverConnects(t *testing.T) {
	r, u := newWebhookRig(t, 1<<30, nil)
	r.l.o.Engine.Lease = 150 * time.Millisecond
	if res := r.l.deliver(send(), u); res.Outcome != engine.OutcomeTimeout {
		t.Fatalf("outcome %v; want a timeout", res.Outcome)
	}
	if r.dial.Load() < 2 || r.read.Load() != 0 {
		t.Fatalf("%d dials, %d requests read; want at least 2 dials and none read", r.dial.Load(), r.read.Load())
	}
}

func counterValue(t *testing.T, l *loop) float64 {
	t.Helper()
	var m dto.Metric
	if err := l.m.unwritten.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// heldTimers stands in for time.AfterFunc: the test fires what was set.
type heldTimers struct{ fns []func() }

func (h *heldTimers) after(_ time.Duration, f func()) interface{ Stop() bool } {
	h.fns = append(h.fns, f)
	return stopNothing{}
}

type stopNothing struct{}

func (stopNothing) Stop() bool { return false }

// The timeout cancels a request with no answer yet; with the answer's
// first byte read it waits one timeout more instead (the reference once
// dropped a 2xx already in its socket when its timer fired: issue 38).
func TestDeadlineWaitsForAnAnswerThatHasBegun(t *testing.T) {
	for _, begun := range []bool{false, true} {
		h := &heldTimers{}
		w := writeWatch{after: h.after}
		w.init()
		if begun {
			w.firstByte()
		}
		cancelled := 0
		stop := w.deadline(time.Second, func() { cancelled++ })
		h.fns[0]() // the timeout passes
		switch {
		case !begun && cancelled != 1:
			t.Fatalf("no answer begun: cancelled %d times at the timeout; want once", cancelled)
		case begun && (cancelled != 0 || len(h.fns) != 2):
			t.Fatalf("answer begun: cancelled %d times, %d timers; want no cancel and a grace timer", cancelled, len(h.fns))
		case begun:
			h.fns[1]() // the grace passes too
			if cancelled != 1 {
				t.Fatalf("after the grace: cancelled %d times; want once", cancelled)
			}
		}
		stop()
	}
}

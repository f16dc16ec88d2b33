package runtime

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// send performs one webhook request on its own goroutine and reports the
// result to the loop.
func (l *loop) send(s engine.Send) {
	l.pending++
	l.busy.Add(1)
	l.reqs[s.RequestID] = sentReq{bot: s.Bot, event: s.EventID}
	u, sem := l.bots.lookup(s.Bot)
	go func() {
		defer l.busy.Done()
		res := engine.WebhookResult{RequestID: s.RequestID, Outcome: engine.OutcomeRefused}
		if l.skipSnapshotDelete(s) {
			res.Outcome = engine.OutcomeOK
		} else if u == "" {
			l.log.Warn("no webhook URL for bot; counted as refused", "bot", s.Bot)
		} else {
			select {
			case sem <- struct{}{}:
				res = l.deliver(s, u)
				<-sem
			case <-l.sendCtx.Done():
			}
		}
		select {
		case l.results <- res:
		case <-l.sendCtx.Done():
		}
	}()
}

// deliver makes one attempt: it POSTs the body until the request has
// left this process whole, then reports what came of that request.
//
// PROTOCOL.md (Attempts and dead letters) counts as an attempt only a
// request a bot read in full, and asks an engine to resend, uncounted, a
// request that failed before it was written. On a loaded machine this
// process can be descheduled past the webhook timeout before the
// transport has dialled or written anything; reporting that as a timeout
// made the engine count an attempt no bot ever saw, and dead-letter a
// message the wire showed one attempt short of max (issue 38, at double
// load). A request written whole sits in the bot's socket and is read
// even after we hang up, so from then on the outcome stands.
//
// The resends are bounded by noWireFor: past it the result is reported
// as it is (the engine gives up on a request after a Lease anyway), so a
// bot that never takes a connection still fails its attempts.
func (l *loop) deliver(s engine.Send, u string) engine.WebhookResult {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = l.o.Engine.WebhookTimeout
	}
	giveUp := time.Now().Add(noWireFor(timeout, l.o.Engine.Lease))
	for {
		res, written := l.post(s, u, timeout)
		if written || res.Outcome != engine.OutcomeTimeout || l.sendCtx.Err() != nil || !time.Now().Before(giveUp) {
			return res
		}
		l.m.unwritten.Inc()
		// A dial that fails at once (no free port, say) must not spin.
		t := time.NewTimer(resendPause)
		select {
		case <-t.C:
		case <-l.sendCtx.Done():
			t.Stop()
		}
	}
}

// resendPause spaces the resends of a request that never left the process.
const resendPause = 10 * time.Millisecond

// noWireFor is how long deliver keeps resending a request that never left
// this process: half the time between the webhook timeout and the lease,
// so the result still arrives while the message is leased to us.
func noWireFor(timeout, lease time.Duration) time.Duration {
	if lease <= timeout {
		return 0
	}
	return timeout + (lease-timeout)/2
}

// post sends the request once, bounded by timeout, and says whether the
// whole request was written to the connection.
func (l *loop) post(s engine.Send, u string, timeout time.Duration) (res engine.WebhookResult, written bool) {
	res.RequestID = s.RequestID
	var w writeWatch
	w.init()
	trace := &httptrace.ClientTrace{GotConn: w.gotConn, WroteRequest: w.wroteRequest, GotFirstResponseByte: w.firstByte}
	ctx, cancel := context.WithCancel(httptrace.WithClientTrace(l.sendCtx, trace))
	defer cancel()
	defer w.deadline(timeout, cancel)()
	start := time.Now()
	outcome := "refused"
	defer func() { l.m.webhook.WithLabelValues(outcome).Observe(time.Since(start).Seconds()) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(s.Body))
	if err != nil {
		res.Outcome = engine.OutcomeRefused
		return res, false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", s.EventID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(s.Timestamp, 10))
	req.Header.Set("webhook-signature", s.Signature)
	resp, err := l.webhook.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			res.Outcome, outcome = engine.OutcomeRefused, "refused"
		default:
			// A timeout, or a connection that broke after the request
			// left: the bot may have processed it.
			res.Outcome, outcome = engine.OutcomeTimeout, "timeout"
		}
		return res, w.written(timeout)
	}
	// Read a bounded amount so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res.Outcome, outcome = engine.OutcomeOK, "ok"
	} else {
		res.Outcome, res.Status, outcome = engine.OutcomeStatus, resp.StatusCode, "status"
	}
	return res, true
}

// writeWatch learns from the transport whether a request left whole.
type writeWatch struct {
	conn, whole atomic.Bool
	done        chan struct{} // one word from the writer, whatever it says
	answering   atomic.Bool   // the answer's first byte has been read
	// after is time.AfterFunc unless a test holds the clock.
	after func(time.Duration, func()) interface{ Stop() bool }
}

func (w *writeWatch) firstByte() { w.answering.Store(true) }

// deadline cancels the request when timeout passes, unless the answer has
// begun to arrive: then it waits one timeout more for the rest. PROTOCOL.md
// (Whose clock decides the timeout) asks an engine to take an answer
// already waiting in its socket; a context deadline does not (net/http
// returns the deadline's error even with the status line read), and at
// load 26-34 the reference re-sent a message whose 2xx the bot had written
// 2 ms after reading the request. It returns the function that stops it.
func (w *writeWatch) deadline(timeout time.Duration, cancel func()) (stop func()) {
	after := w.after
	if after == nil {
		after = func(d time.Duration, f func()) interface{ Stop() bool } { return time.AfterFunc(d, f) }
	}
	var grace interface{ Stop() bool }
	var mu sync.Mutex
	t := after(timeout, func() {
		if !w.answering.Load() {
			cancel()
			return
		}
		mu.Lock()
		grace = after(timeout, cancel)
		mu.Unlock()
	})
	return func() {
		t.Stop()
		mu.Lock()
		if grace != nil {
			grace.Stop()
		}
		mu.Unlock()
	}
}

func (w *writeWatch) init() { w.done = make(chan struct{}, 1) }

func (w *writeWatch) gotConn(httptrace.GotConnInfo) { w.conn.Store(true) }

func (w *writeWatch) wroteRequest(i httptrace.WroteRequestInfo) {
	if i.Err == nil {
		w.whole.Store(true)
	}
	select {
	case w.done <- struct{}{}:
	default:
	}
}

// written answers once the request has failed. Without a connection
// nothing was written. With one, the transport's writer may still be
// finishing when the deadline ends the request (a flush that completed
// just before it, on a descheduled process), so its word is awaited;
// the failed request closes the connection, so the word comes promptly.
// If it never comes within wait, the request counts as written: resending
// a request the bot may have read would put an attempt on the wire that
// the engine never counts.
func (w *writeWatch) written(wait time.Duration) bool {
	if !w.conn.Load() {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.done:
		return w.whole.Load()
	case <-t.C:
		return true
	}
}

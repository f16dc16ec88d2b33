package runtime

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
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

// deliver POSTs the body with the Standard Webhooks headers the engine
// computed, bounded by the Send's timeout.
func (l *loop) deliver(s engine.Send, u string) engine.WebhookResult {
	res := engine.WebhookResult{RequestID: s.RequestID}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = l.o.Engine.WebhookTimeout
	}
	ctx, cancel := context.WithTimeout(l.sendCtx, timeout)
	defer cancel()
	start := time.Now()
	outcome := "refused"
	defer func() { l.m.webhook.WithLabelValues(outcome).Observe(time.Since(start).Seconds()) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(s.Body))
	if err != nil {
		res.Outcome = engine.OutcomeRefused
		return res
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
		return res
	}
	// Read a bounded amount so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res.Outcome, outcome = engine.OutcomeOK, "ok"
	} else {
		res.Outcome, res.Status, outcome = engine.OutcomeStatus, resp.StatusCode, "status"
	}
	return res
}

package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/internal/readall"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// RxEntry is the way into a bot's receiver: the SDK has three (Handle, and
// the HTTP wrappers Handler and Middleware), and each must answer the same
// request the same way, so the workload draws which one a bot uses.
type RxEntry int

const (
	RxHandle     RxEntry = iota // receiver.Handle, no HTTP
	RxHandler                   // receiver.Handler over an in-process HTTP exchange
	RxMiddleware                // receiver.Middleware in front of the bot's own http.Handler
)

// errHandlerFailed is a bot handler's transient failure (BotSpec.HandlerFailRate).
var errHandlerFailed = errors.New("bot handler failed (simulated)")

// newBotReceiver builds b's receiver the way its spec asks: secrets given
// raw or in the "whsec_" form, in-memory dedup, the store's durable dedup
// (receiver.StoreDedup), or none for the known-bug variant.
func (s *sim) newBotReceiver(b *bot) (*receiver.Receiver, error) {
	spec := b.spec
	cfg := receiver.Config{
		Secrets: [][]byte{spec.Secret}, Window: s.w.ReceiverWindow, MaxEntries: s.w.ReceiverEntries, Tolerance: s.w.ReceiverTolerance,
		NoDedup: s.cfg.Bugs.NoReceiverDedup,
		Now:     func() time.Time { return s.now },
	}
	if spec.WhsecSecret {
		// A retired key first: a request is accepted under any configured
		// secret, so the one that matches must still be found.
		old := append([]byte("retired-"), spec.Secret...)
		keys, err := receiver.ParseSecrets(webhook.FormatSecret(old), webhook.FormatSecret(spec.Secret))
		if err != nil {
			return nil, err
		}
		cfg.Secrets = keys
	}
	// A bot configured in whsec_ form also leaves the bounds that equal
	// the SDK's defaults at zero, as a developer who takes the defaults
	// does: the receiver must fill them in.
	if spec.WhsecSecret {
		if cfg.Window == receiver.DefaultWindow {
			cfg.Window = 0
		}
		if cfg.MaxEntries == receiver.DefaultMaxEntries {
			cfg.MaxEntries = 0
		}
	}
	if b.durable {
		cfg.Dedup = receiver.NewStoreDedup(simMarker{s: s, b: b}, spec.ID, cfg.Window)
	}
	return receiver.New(cfg)
}

// simMarker is a durable bot's view of the store's MarkProcessed. A store
// error counts as first sight: the handler runs, as a receiver that cannot
// reach its store must choose delivery over loss.
type simMarker struct {
	s *sim
	b *bot
}

func (m simMarker) MarkProcessed(_ context.Context, req impl.MarkRequest) (bool, error) {
	first, err := m.s.store.MarkProcessed(m.s.ctx, req)
	if err != nil {
		m.s.rec("bot/"+m.b.spec.ID, "store-real-error", "method", "MarkProcessed", "err", err.Error())
		return true, nil
	}
	if !first {
		m.s.rec("bot/"+m.b.spec.ID, "durable-duplicate", "event", req.EventID)
	}
	return first, nil
}

// handlerFails rolls whether b's handler fails this run (only while faults
// are injected, so that every obligation can still resolve after the heal).
func (s *sim) handlerFails(b *bot) bool {
	return s.active && b.failRate > 0 && b.hrng.Float64() < b.failRate
}

// receive hands one request to b's receiver through the bot's entry and
// returns the receiver's answer as Handle would give it.
func (s *sim) receive(b *bot, req receiver.Request, h receiver.HandlerFunc) receiver.Result {
	if b.spec.Entry == RxHandle {
		return b.rx.Handle(context.Background(), s.now, req, h)
	}
	hr, rec := s.wire.next(req.Body)
	defer s.wire.done()
	req.Headers.Set(hr.Header)
	ran := false
	switch b.spec.Entry {
	case RxHandler:
		b.rx.Handler(func(ctx context.Context, ev receiver.Event) error {
			ran = true
			return h(ctx, ev)
		}).ServeHTTP(rec, hr)
	case RxMiddleware:
		style := b.hrng.IntN(4)
		b.rx.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			ev, ok := receiver.EventFrom(r.Context())
			body, err := readall.Sized(r.Body, r.ContentLength, r.ContentLength) // the verified body, its length the request's
			if !ok || err != nil {
				http.Error(w, "no verified event", http.StatusTeapot)
				return
			}
			ev.Body = body // what the bot's own handler reads
			if err := h(r.Context(), ev); err != nil {
				http.Error(w, err.Error(), []int{500, 503, 422}[style%3])
				return
			}
			switch style {
			case 1:
				w.WriteHeader(http.StatusOK)
			case 2:
				w.WriteHeader(http.StatusNoContent)
			case 3:
				_, _ = w.Write([]byte("ok"))
			}
		})).ServeHTTP(rec, hr)
	}
	res := receiver.Result{Status: rec.Code, Reason: string(bytes.TrimSpace(rec.body))}
	switch {
	case rec.Code >= 200 && rec.Code <= 299:
		res.Outcome, res.Reason = receiver.Duplicate, ""
		if ran {
			res.Outcome = receiver.Handled
		}
	case rec.Code == http.StatusBadRequest || rec.Code == http.StatusUnauthorized || rec.Code == http.StatusRequestEntityTooLarge:
		res.Outcome = receiver.Rejected
	case rec.Code == http.StatusConflict:
		res.Outcome = receiver.Busy
	case rec.Code == http.StatusServiceUnavailable && !ran:
		res.Outcome = receiver.Unavailable
	default:
		res.Outcome = receiver.Failed
	}
	return res
}

// rxRecorder is the part of httptest.ResponseRecorder a delivery reads
// (the status and the body) without its per-request header snapshot and
// buffers: Code starts at 200, the first WriteHeader (or a Write, as 200)
// sets it, an invalid code panics as ResponseRecorder's does, and the body
// is everything written. TestRxRecorderIsResponseRecorder holds the two
// equal.
type rxRecorder struct {
	Code   int
	header http.Header
	body   []byte
	wrote  bool
}

func (r *rxRecorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}

func (r *rxRecorder) WriteHeader(code int) {
	if r.wrote {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	r.Code, r.wrote = code, true
}

func (r *rxRecorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	r.body = append(r.body, b...)
	return len(b), nil
}

// rxWire is the request and the recorder of one delivery through an HTTP
// entry, kept for the next: a delivery allocated the request, its URL,
// header map, body reader and closer, and the recorder, each time (a
// tenth of a run's allocated objects). The receiver keeps none of them
// once it has answered (it reads the body into bytes of its own). A
// delivery made while another is in progress gets new ones.
type rxWire struct {
	req  http.Request
	url  url.URL
	body bytes.Reader
	rc   io.ReadCloser // io.NopCloser(&body)
	rec  rxRecorder
	busy bool
}

// next returns the request newWebhookRequest(body) returns, and a recorder
// as new, for one delivery; done hands them back.
func (w *rxWire) next(body []byte) (*http.Request, *rxRecorder) {
	if w.busy {
		return newWebhookRequest(body), &rxRecorder{Code: http.StatusOK}
	}
	w.busy = true
	h := w.req.Header
	if h == nil {
		h = http.Header{}
		w.rc = io.NopCloser(&w.body)
	}
	clear(h)
	w.body.Reset(body)
	w.url = url.URL{Path: "/webhook"}
	w.req = webhookRequest(&w.url, h, w.rc, len(body))
	rh := w.rec.header
	clear(rh)
	w.rec = rxRecorder{Code: http.StatusOK, header: rh, body: w.rec.body[:0]}
	return &w.req, &w.rec
}

func (w *rxWire) done() { w.busy = false }

// newWebhookRequest is the request httptest.NewRequest(POST, "/webhook",
// body) returns (TestNewWebhookRequestIsHTTPTests holds them equal), built
// without parsing a request line through a fresh 4 KB bufio reader on each
// delivery (a tenth of a sweep's allocations).
func newWebhookRequest(body []byte) *http.Request {
	r := webhookRequest(&url.URL{Path: "/webhook"}, http.Header{}, io.NopCloser(bytes.NewReader(body)), len(body))
	return &r
}

func webhookRequest(u *url.URL, h http.Header, body io.ReadCloser, n int) http.Request {
	return http.Request{
		Method: http.MethodPost, URL: u, RequestURI: "/webhook",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: body, ContentLength: int64(n),
		Host: "example.com", RemoteAddr: "192.0.2.1:1234",
	}
}

// maybeForge, at the bot's ForgeRate, has a forged copy of sd reach the
// bot's receiver shortly after the real one: the same webhook-id and
// timestamp over a body the engine did not sign, or the real body under a
// signature cut short. The receiver must refuse it (401, no handler run);
// the oracle judges the answer (signed-requests-verify) and, if the
// handler ran, no-phantom-delivery reports the foreign payload.
func (s *sim) maybeForge(b *bot, sd engine.Send, lat time.Duration) {
	if b.spec.ForgeRate <= 0 || b.hrng.Float64() >= b.spec.ForgeRate {
		return
	}
	forged := sd
	switch b.hrng.IntN(3) {
	case 0:
		forged.Body = append([]byte("{\"forged\":true}"), sd.Body...)
	case 1:
		forged.Signature = sd.Signature[:len(sd.Signature)/2]
	default:
		s.stampProbe(b, sd, lat)
		return
	}
	s.inflight++
	s.after(lat+between(b.hrng, 0, 50*time.Millisecond), func() {
		s.inflight--
		req := receiver.Request{Body: forged.Body, Headers: webhook.Headers{
			ID: forged.EventID, Timestamp: s.tsText(forged.Timestamp), Signature: forged.Signature}}
		// forged, not sd: the closure would move sd to the heap on every
		// send, forged or not (the same event, stream and kind).
		res := s.receive(b, req, func(_ context.Context, ev receiver.Event) error {
			s.observe(oracle.Observation{Kind: oracle.ObsHandled, Bot: b.spec.ID, EventID: ev.ID, Payload: ev.Body,
				Snapshot: forged.Snapshot, Stream: forged.Stream, Stamp: forged.Timestamp, Stamped: true})
			return nil
		})
		s.rec(b.actor, "forged", "event", forged.EventID, "outcome", res.Outcome.String(), "status", res.Status)
		s.observe(oracle.Observation{Kind: oracle.ObsForged, Bot: b.spec.ID, EventID: forged.EventID, Status: res.Status,
			Detail: res.Reason, Snapshot: forged.Snapshot})
	})
}

// stampEdges are where a stamp probe puts its request's age (past side)
// or lead (future side) against the receiver's tolerance: a second
// inside, exactly at it, a nanosecond and a second past it (the first
// values the Standard Webhooks rule rejects), and far past it.
var stampEdges = [...]time.Duration{-time.Second, 0, time.Nanosecond, time.Second, 20 * time.Minute}

// stampProbe has a copy of sd, signed with the bot's key, read at an edge
// of the receiver's timestamp tolerance: a stale replay (sd's own stamp,
// read the tolerance plus an edge after it) or a stamp ahead of the
// bot's clock by the tolerance plus an edge, as a signer whose clock
// jumped ahead makes it (read at a whole second, so the lead is exact).
// Engine-signed requests never carry either: node clocks are at most a
// few minutes off. The copy is read by a twin of the bot's receiver
// (the same SDK and secret, its own dedup and no-op handler), so the
// bot's dedup and handler runs stay the real requests'; the oracle
// judges its answer by the Standard Webhooks rules (ObsStampProbe).
func (s *sim) stampProbe(b *bot, sd engine.Send, lat time.Duration) {
	tol := s.rxTolerance()
	edge := stampEdges[b.hrng.IntN(len(stampEdges))]
	stamp := sd.Timestamp
	at := time.Unix(stamp, 0).Add(tol + edge)
	if b.hrng.IntN(2) == 0 {
		at = s.now.Add(lat).Truncate(time.Second).Add(time.Second)
		stamp = at.Add(tol + edge.Truncate(time.Second)).Unix()
		if edge == time.Nanosecond {
			stamp++ // whole seconds: the first stamp past the edge
		}
	}
	if !at.After(s.now) || (s.w.ReceiverTolerance > 0 && at.After(s.healAt)) {
		return // a drawn tolerance of minutes or hours would keep a settled world running
	}
	body, id := sd.Body, sd.EventID
	s.inflight++
	s.at(at, func() {
		s.inflight--
		key := b.spec.Secret
		twin, err := receiver.New(receiver.Config{Secrets: [][]byte{key}, Tolerance: s.w.ReceiverTolerance, Now: func() time.Time { return s.now }})
		if err != nil {
			s.fatal = fmt.Errorf("bot %s: its twin receiver: %w", b.spec.ID, err)
			return
		}
		req := receiver.Request{Body: body, Headers: webhook.NewHeaders(key, id, stamp, body)}
		res := twin.Handle(context.Background(), s.now, req, func(context.Context, receiver.Event) error { return nil })
		s.rec(b.actor, "stamp-probe", "event", id, "stamp", stamp, "outcome", res.Outcome.String(), "status", res.Status)
		s.observe(oracle.Observation{Kind: oracle.ObsStampProbe, Bot: b.spec.ID, EventID: id, Stamp: stamp, Stamped: true,
			OK: res.Outcome == receiver.Handled || res.Outcome == receiver.Duplicate, Status: res.Status, Detail: res.Reason})
	})
}

package chaos

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// Bot fault modes.
const (
	modeHealthy = iota
	mode5xx     // answer 500 without running the handler
	modeRefuse  // the listener is closed: connection refused
	modeTimeout // run the handler, then answer after the engine gave up
	modeSlow    // answer correctly, but late (within the timeout)
	modeDup     // the request arrives twice (a duplicating network)
)

// botModes are the bot faults of the schedule, by kind.
var botModes = map[faults.Kind]int32{faults.Webhook5xx: mode5xx, faults.WebhookRefused: modeRefuse,
	faults.WebhookTimeout: modeTimeout, faults.WebhookSlow: modeSlow, faults.WebhookDuplicate: modeDup}

// bot is one webhook server. It verifies and deduplicates with
// impl/receiver, and reports what crossed the wire to the recorder.
type bot struct {
	id      string
	secret  []byte
	rcv     *receiver.Receiver
	rec     *recorder
	timeout time.Duration // the engine's webhook timeout
	// chooses: the bot answers events by their answerClass (every bot of a
	// run but bot-0, the healthy witness).
	chooses bool
	triesMu sync.Mutex
	tries   map[string]int // requests per event so far, for transient and doomed answers
	onOK    func()         // called after a 2xx answer is written (a kill may be aimed at it)

	addr string
	mode atomic.Int32

	mu  sync.Mutex
	srv *http.Server

	modeMu sync.Mutex // serializes mode changes (listener close/reopen)
}

func newBot(id string, secret []byte, rec *recorder, timeout time.Duration, window time.Duration) (*bot, error) {
	rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{secret}, Window: window})
	if err != nil {
		return nil, err
	}
	b := &bot{id: id, secret: secret, rec: rec, timeout: timeout, rcv: rcv}
	ln, err := stableListener()
	if err != nil {
		return nil, err
	}
	b.addr = ln.Addr().String()
	b.serve(ln)
	return b, nil
}

func (b *bot) url() string {
	b.modeMu.Lock()
	defer b.modeMu.Unlock()
	return "http://" + b.addr + "/"
}

// move serves the bot on a new port as well and returns its URL; the old
// port keeps answering for grace (requests already addressed to it), then
// refuses connections.
func (b *bot) move(grace time.Duration) (string, error) {
	ln, err := stableListener()
	if err != nil {
		return "", err
	}
	b.modeMu.Lock()
	defer b.modeMu.Unlock()
	b.mu.Lock()
	old := b.srv
	b.mu.Unlock()
	b.addr = ln.Addr().String()
	if b.mode.Load() == modeRefuse {
		_ = ln.Close() // reopened on the new address when the fault ends
	} else {
		b.serve(ln)
	}
	if old != nil {
		time.AfterFunc(grace, func() { _ = old.Close() })
	}
	return "http://" + b.addr + "/", nil
}

func (b *bot) serve(ln net.Listener) {
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// setMode switches the fault; entering and leaving refuse closes and
// reopens the listener on the same port.
func (b *bot) setMode(m int32) {
	b.modeMu.Lock()
	defer b.modeMu.Unlock()
	old := b.mode.Swap(m)
	if old == m {
		return
	}
	if m == modeRefuse {
		b.mu.Lock()
		srv := b.srv
		b.srv = nil
		b.mu.Unlock()
		if srv != nil {
			_ = srv.Close()
		}
	}
	if old == modeRefuse {
		// The port was ours a moment ago; retry briefly if the kernel
		// has not let go of it yet.
		for i := 0; i < 50; i++ {
			ln, err := net.Listen("tcp", b.addr)
			if err == nil {
				b.serve(ln)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.rec.harnessError("bot %s could not listen on %s again after refusing", b.id, b.addr)
	}
}

// clearMode heals m if it is still the bot's fault.
func (b *bot) clearMode(m int32) {
	if b.mode.Load() == m {
		b.setMode(modeHealthy)
	}
}

func (b *bot) close() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (b *bot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	id := r.Header.Get("webhook-id")
	mode := b.mode.Load()
	q := b.rec.send(b.id, id, body, mode)
	if status := b.chosenStatus(id); status != 0 {
		b.rec.answer(q, outStatus, status, time.Now())
		http.Error(w, "the workload's answer to this event", status)
		return
	}
	if mode == mode5xx {
		b.rec.answer(q, outStatus, http.StatusInternalServerError, time.Now())
		http.Error(w, "injected failure", http.StatusInternalServerError)
		return
	}
	req := receiver.Request{Headers: webhook.HeadersOf(r.Header), Body: body}
	handle := func() receiver.Result {
		return b.rcv.Handle(r.Context(), time.Now(), req, func(_ context.Context, ev receiver.Event) error {
			b.rec.handled(b.id, ev.ID)
			return nil
		})
	}
	res := handle()
	if res.Outcome == receiver.Rejected {
		b.rec.rejected(b.id, id, res.Reason)
	}
	if mode == modeDup {
		b.rec.dupInjected()
		handle()
	}
	switch mode {
	case modeTimeout:
		// The handler ran; the answer comes after the engine stopped
		// waiting, so the engine must retry and the receiver must dedup.
		b.rec.answer(q, outTimeout, 0, q.at.Add(b.timeout))
		wait(r, 2*b.timeout+100*time.Millisecond)
		w.WriteHeader(res.Status)
		return
	case modeSlow:
		wait(r, b.timeout*2/5)
	}
	switch {
	case res.Outcome == receiver.Rejected:
		b.rec.answer(q, outRejected, res.Status, time.Now())
	case res.Status >= 200 && res.Status < 300:
		b.rec.answer(q, outOK, res.Status, time.Now())
	default:
		b.rec.answer(q, outStatus, res.Status, time.Now())
	}
	w.WriteHeader(res.Status)
	if res.Status >= 200 && res.Status < 300 && b.onOK != nil {
		// On the wire before the moment is announced: a kill aimed at it
		// comes after the engine could have read the answer.
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		b.onOK()
	}
}

func wait(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// chosenStatus is the failure this bot answers to this request of event
// id by the event's answerClass, or 0 to take it as usual: a permanent
// status every time, a retryable 4xx to the first transientTries
// requests, a retryable failure to every request of a doomed event
// (cycling through doomedStatuses by request).
func (b *bot) chosenStatus(id string) int {
	if !b.chooses {
		return 0
	}
	class, status := answerClass(id)
	if class == answerNormal || class == answerPermanent {
		return status
	}
	b.triesMu.Lock()
	n := b.tries[id]
	if b.tries == nil {
		b.tries = map[string]int{}
	}
	b.tries[id] = n + 1
	b.triesMu.Unlock()
	switch {
	case class == answerDoomed:
		return doomedStatuses[n%len(doomedStatuses)]
	case n < transientTries:
		return status
	}
	return 0
}

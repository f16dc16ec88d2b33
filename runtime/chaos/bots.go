package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// Bot fault modes.
const (
	modeHealthy = iota
	mode5xx     // answer 500 without running the handler
	// modeRefuse: connections are refused. The bot still accepts each one,
	// reads the request and resets the connection without an answer, so
	// that every attempt is seen and attributed to its message: a closed
	// listener refused attempts no one could count, and an engine without
	// /v1/observe that dead-lettered after them was judged to have lost
	// the message (issue 37).
	modeRefuse
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
	// after runs f once d has passed (time.AfterFunc unless a test holds
	// the clock: a grace's end is then an event the test fires).
	after func(d time.Duration, f func())

	mode atomic.Int32

	mu    sync.Mutex
	addr  string
	ports []*port // every address the bot ever served on, the current one last
}

// port is one address a bot serves on. A retired port (the bot moved away
// from it) refuses every connection the way modeRefuse does, counting it.
type port struct {
	b       *bot
	srv     *http.Server
	watch   *connWatch
	retired atomic.Bool
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
	b.serve(ln)
	return b, nil
}

func (b *bot) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://" + b.addr + "/"
}

// move serves the bot on a new port as well and returns its URL; the old
// port keeps answering for grace (requests already addressed to it), then
// refuses connections (counted, as in modeRefuse).
func (b *bot) move(grace time.Duration) (string, error) {
	ln, err := stableListener()
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	old := b.ports[len(b.ports)-1]
	b.mu.Unlock()
	u := "http://" + b.serve(ln) + "/"
	afterFunc(b.after)(grace, func() { old.retired.Store(true) })
	return u, nil
}

// afterFunc is f, or time.AfterFunc when f is nil.
func afterFunc(f func(time.Duration, func())) func(time.Duration, func()) {
	if f != nil {
		return f
	}
	return func(d time.Duration, g func()) { time.AfterFunc(d, g) }
}

// serve starts serving ln as the bot's current address, and returns it.
func (b *bot) serve(ln net.Listener) string {
	p := &port{b: b}
	w := &connWatch{bot: b.id, rec: b.rec}
	p.watch = w
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second, ConnContext: w.accepted, ConnState: w.state}
	b.mu.Lock()
	b.addr = ln.Addr().String()
	b.ports = append(b.ports, p)
	b.mu.Unlock()
	go func() { _ = p.srv.Serve(watchedListener{ln}) }()
	return ln.Addr().String()
}

// setMode switches the fault. No listener is closed or reopened: refusing
// is done per request (modeRefuse), so a request in flight at the switch
// finishes under the mode it arrived in.
func (b *bot) setMode(m int32) { b.mode.Store(m) }

// clearMode heals m if it is still the bot's fault.
func (b *bot) clearMode(m int32) { b.mode.CompareAndSwap(m, modeHealthy) }

func (b *bot) close() {
	b.mu.Lock()
	ports := b.ports
	b.ports = nil
	b.mu.Unlock()
	for _, p := range ports {
		_ = p.srv.Close()
	}
}

func (p *port) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.b.serveHTTP(w, r, p.retired.Load())
}

// refuse resets the connection under w without an answer (SO_LINGER 0:
// the engine reads ECONNRESET, as from a refused connection). It records
// the failed attempt first: once the engine sees the reset it may act on
// it, and the record must already say what it saw.
func (b *bot) refuse(w http.ResponseWriter, q *request) {
	b.rec.answer(q, outReset, 0, time.Now())
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}
}

// reply writes status (and msg) to the engine, and records the answer as
// given only once it was written and flushed to a connection that was
// still open: when the engine had already hung up, or the write fails, no
// answer reached it and none is recorded (outDropped). (A bot whose slow
// handler was cut off once recorded a 2xx the engine never got, and a
// correct re-send was judged a replay: issue 37.) The kernel may still
// accept a write to a peer that closed a moment before; the webhook
// timeout rule (failedAttempt) covers an engine that gave up.
func (b *bot) reply(w http.ResponseWriter, r *http.Request, q *request, outcome string, status int, msg string) {
	seen := connOf(r.Context())
	if r.Context().Err() != nil || (seen != nil && peerGone(seen.raw)) {
		b.rec.answer(q, outDropped, 0, time.Now())
		return
	}
	if msg != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	writing := time.Now()
	w.WriteHeader(status)
	if msg != "" {
		_, _ = io.WriteString(w, msg+"\n")
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		b.rec.answer(q, outDropped, 0, time.Now())
		return
	}
	b.rec.answerWritten(q, outcome, status, writing, time.Now())
	if outcome == outOK && seen != nil {
		seen.lastOK.Store(q)
	}
}

func (b *bot) serveHTTP(w http.ResponseWriter, r *http.Request, retired bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	id := r.Header.Get("webhook-id")
	mode := b.mode.Load()
	q := b.rec.send(b.id, id, body, mode)
	carried(r.Context())
	if mode == modeRefuse || retired {
		b.refuse(w, q)
		return
	}
	if status := b.chosenStatus(id); status != 0 {
		b.reply(w, r, q, outStatus, status, "the workload's answer to this event")
		return
	}
	if mode == mode5xx {
		b.reply(w, r, q, outStatus, http.StatusInternalServerError, "injected failure")
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
		// Whatever reaches the engine then, the attempt failed.
		b.rec.answer(q, outTimeout, 0, q.at.Add(b.timeout))
		wait(r, 2*b.timeout+100*time.Millisecond)
		if r.Context().Err() == nil {
			w.WriteHeader(res.Status)
		}
		return
	case modeSlow:
		wait(r, b.timeout*2/5)
	}
	switch {
	case res.Outcome == receiver.Rejected:
		b.reply(w, r, q, outRejected, res.Status, "")
	case res.Status >= 200 && res.Status < 300:
		b.reply(w, r, q, outOK, res.Status, "")
	default:
		b.reply(w, r, q, outStatus, res.Status, "")
	}
	if res.Status >= 200 && res.Status < 300 && b.onOK != nil {
		// On the wire (reply flushed it) before the moment is announced: a
		// kill aimed at it comes after the engine could read the answer.
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

// connWatch notes the connections a port accepted that closed before they
// carried one whole request (recorder.emptyConn): what an engine leaves on
// the wire when it gives up on a request before writing it. They are no
// attempts; a dead-letter-earned failure cites them, so an implementer
// sees why the wire shows fewer attempts than the engine counted.
type connWatch struct {
	bot   string
	rec   *recorder
	conns sync.Map     // net.Conn → *connSeen
	taken atomic.Int64 // connections accepted, ever
}

type connSeen struct {
	at      time.Time
	raw     net.Conn
	carried atomic.Bool // a request on it was read whole
	// lastOK is the 2xx last written on it, until the engine sends its
	// next request there (which it does only after reading that answer).
	lastOK atomic.Pointer[request]
	reset  atomic.Bool // a read on it failed with a reset from the engine
}

// watchedListener hands the server connections that note a reset from
// the engine (connSeen.reset).
type watchedListener struct{ net.Listener }

func (l watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, seen: &connSeen{at: time.Now(), raw: c}}, nil
}

type watchedConn struct {
	net.Conn
	seen *connSeen
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && errors.Is(err, syscall.ECONNRESET) {
		c.seen.reset.Store(true)
	}
	return n, err
}

type connKey struct{}

func (w *connWatch) accepted(ctx context.Context, c net.Conn) context.Context {
	seen := &connSeen{at: time.Now(), raw: c}
	if wc, ok := c.(*watchedConn); ok {
		seen = wc.seen
	}
	w.conns.Store(c, seen)
	w.taken.Add(1)
	return context.WithValue(ctx, connKey{}, seen)
}

func (w *connWatch) state(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	if v, ok := w.conns.LoadAndDelete(c); ok {
		seen := v.(*connSeen)
		if !seen.carried.Load() {
			w.rec.emptyConn(w.bot, seen.at)
		}
		if q := seen.lastOK.Load(); q != nil && seen.reset.Load() {
			w.rec.unread(q)
		}
	}
}

// carried marks the request's connection as having carried a whole
// request: and the engine, sending it, had read the answer before it.
func carried(ctx context.Context) {
	if seen := connOf(ctx); seen != nil {
		seen.carried.Store(true)
		seen.lastOK.Store(nil)
	}
}

func connOf(ctx context.Context) *connSeen {
	seen, _ := ctx.Value(connKey{}).(*connSeen)
	return seen
}

// open counts the connections accepted and not yet closed.
func (w *connWatch) open() int {
	n := 0
	w.conns.Range(func(any, any) bool { n++; return true })
	return n
}

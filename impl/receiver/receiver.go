// Package receiver is the bot-side SDK of seed 000: it verifies a Standard
// Webhooks request (signature under one or more secrets, timestamp
// tolerance), drops duplicates by webhook-id, and runs the bot's handler
// once for each new event. A bot developer gets exactly-once handling
// within the dedup window without writing any of it.
//
// Two ways in:
//
//   - Middleware / Handler wrap an http.Handler for a real endpoint.
//   - Handle does the same work without HTTP; the simulator's bots call it,
//     so the simulated receivers run the very code a bot would.
//
// Dedup is in memory by default (bounded in time by Config.Window and in
// size by Config.MaxEntries, oldest first), or durable through any store
// with MarkProcessed (impl.Store has it): see NewStoreDedup.
//
// Status codes (what the sender should do next):
//
//	200  handled, or a duplicate of a handled event (the handler does not
//	     run again): stop retrying.
//	400  missing webhook-id/-timestamp/-signature, a timestamp that is not
//	     an integer, or a timestamp outside the tolerance. Not retried as
//	     is, but a sender that re-signs its retries (as deliverysim's
//	     engine does) gets through once its clock is sane.
//	401  no signature matches any configured secret.
//	409  the same webhook-id is being handled right now by another request:
//	     retry later; answering 2xx could acknowledge an event whose
//	     handler then fails.
//	413  body larger than Config.MaxBody.
//	500  the handler failed (returned an error, panicked, or wrote a non-2xx
//	     status): the id is released so the sender's retry runs it again.
//	503  the durable dedup store failed: retry later (Retry-After is set).
//
// Time is passed in to Handle; only the HTTP wrappers read a clock
// (Config.Now, time.Now by default). A duplicate that arrives after its
// entry expired or was evicted cannot be recognised: it is handled again,
// and reported by whoever sees the whole trace (the simulator's checker).
package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

// Defaults for zero Config fields.
const (
	DefaultTolerance  = webhook.DefaultTolerance
	DefaultWindow     = 24 * time.Hour
	DefaultMaxEntries = 10000
	DefaultMaxBody    = 1 << 20
)

// Config configures a Receiver. Zero fields take the defaults above.
type Config struct {
	// Secrets are the raw HMAC keys; a request signed with any of them is
	// accepted, so a secret can be rotated by adding the new one, moving
	// the sender over, then removing the old one. Keys in the "whsec_..."
	// form go through webhook.ParseSecret (or use ParseSecrets).
	Secrets [][]byte

	Tolerance  time.Duration // max |now - webhook-timestamp|
	Window     time.Duration // in-memory dedup: how long an id is remembered
	MaxEntries int           // in-memory dedup: most ids remembered; the oldest go first

	// Dedup replaces the in-memory dedup (e.g. NewStoreDedup for a durable
	// one); Window and MaxEntries are then unused.
	Dedup Deduper

	// NoDedup turns dedup off: every verified request runs the handler.
	// It is the seed-000 "today" SDK, kept as a known-bug variant.
	NoDedup bool

	MaxBody int64            // HTTP wrappers: largest body read
	Now     func() time.Time // HTTP wrappers: the clock (default time.Now)
}

// ParseSecrets decodes secrets in the "whsec_<base64>" form.
func ParseSecrets(ss ...string) ([][]byte, error) {
	out := make([][]byte, 0, len(ss))
	for i, s := range ss {
		k, err := webhook.ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// Event is a verified request, as the handler sees it.
type Event struct {
	ID        string // webhook-id: the idempotency key
	Timestamp int64  // webhook-timestamp, Unix seconds
	Body      []byte
}

// HandlerFunc processes one new event. An error makes the receiver answer
// 500 and forget the id, so that the sender's retry runs it again.
type HandlerFunc func(ctx context.Context, ev Event) error

// Request is one webhook request without HTTP around it.
type Request struct {
	Headers webhook.Headers
	Body    []byte
}

// Outcome classifies what Handle did.
type Outcome int

const (
	Handled     Outcome = iota + 1 // new event: the handler ran and succeeded
	Duplicate                      // already handled: the handler did not run
	Rejected                       // bad headers, signature or timestamp: the handler did not run
	Busy                           // the same id is being handled concurrently
	Failed                         // the handler failed; the id was released
	Unavailable                    // the dedup store failed; the handler did not run
)

func (o Outcome) String() string {
	switch o {
	case Handled:
		return "handled"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	case Busy:
		return "busy"
	case Failed:
		return "failed"
	case Unavailable:
		return "unavailable"
	}
	return "unknown"
}

// Result is Handle's answer. Status is the HTTP status to reply with (see
// the package comment).
type Result struct {
	Outcome Outcome
	Status  int
	Reason  string // short and stable: why it was not handled
	Err     error  // the full error, if any (errors.Is against webhook.Err*)
}

// Receiver is safe for concurrent use; the handler runs outside its lock.
type Receiver struct {
	verifier atomic.Pointer[webhook.Verifier] // swapped whole by SetSecrets
	dedup    Deduper                          // nil: no dedup
	maxBody  int64
	now      func() time.Time

	mu   sync.Mutex
	busy map[string]struct{} // ids whose handler is running
}

// New returns a receiver for cfg, or an error naming a bad field.
func New(cfg Config) (*Receiver, error) {
	if err := checkSecrets("Config.Secrets", cfg.Secrets); err != nil {
		return nil, err
	}
	if cfg.Tolerance < 0 || cfg.Window < 0 || cfg.MaxEntries < 0 || cfg.MaxBody < 0 {
		return nil, errors.New("receiver: Tolerance, Window, MaxEntries and MaxBody must not be negative (0 = default)")
	}
	r := &Receiver{
		maxBody: cfg.MaxBody,
		now:     cfg.Now,
		busy:    map[string]struct{}{},
	}
	r.verifier.Store(webhook.Verifier{Secrets: cfg.Secrets, Tolerance: cfg.Tolerance}.Prepared())
	if r.maxBody == 0 {
		r.maxBody = DefaultMaxBody
	}
	if r.now == nil {
		r.now = time.Now
	}
	switch {
	case cfg.NoDedup:
	case cfg.Dedup != nil:
		r.dedup = cfg.Dedup
	default:
		r.dedup = NewMemoryDedup(cfg.Window, cfg.MaxEntries)
	}
	return r, nil
}

// checkSecrets refuses no secret at all and an empty one (what names where
// they came from).
func checkSecrets(what string, secrets [][]byte) error {
	if len(secrets) == 0 {
		return fmt.Errorf("receiver: %s is empty; give at least one signing secret", what)
	}
	for i, k := range secrets {
		if len(k) == 0 {
			return fmt.Errorf("receiver: %s[%d] is empty; an empty HMAC key authenticates nothing", what, i)
		}
	}
	return nil
}

// SetSecrets replaces the secrets requests are verified with, keeping all
// else (the dedup memory above all), so a key can be rotated without a
// restart: add the new secret, move the sender over, drop the old one.
func (r *Receiver) SetSecrets(secrets [][]byte) error {
	if err := checkSecrets("SetSecrets", secrets); err != nil {
		return err
	}
	keys := make([][]byte, len(secrets))
	for i, k := range secrets {
		keys[i] = slices.Clone(k)
	}
	v := *r.verifier.Load()
	v.Secrets = keys
	r.verifier.Store(v.Prepared()) // new key states: the old ones are the old secrets'
	return nil
}

// Handle verifies one request received at now, dedups it, and runs h if it
// is new. It never reads a clock.
func (r *Receiver) Handle(ctx context.Context, now time.Time, req Request, h HandlerFunc) Result {
	ts, err := r.verifier.Load().Verify(now, req.Headers, req.Body)
	if err != nil {
		return rejected(err)
	}
	id := req.Headers.ID
	if !r.enter(id) {
		return Result{Outcome: Busy, Status: http.StatusConflict, Reason: "webhook-id is being handled"}
	}
	defer r.leave(id)
	if r.dedup != nil {
		fresh, err := r.dedup.Claim(ctx, id, now)
		if err != nil {
			return Result{Outcome: Unavailable, Status: http.StatusServiceUnavailable, Reason: "dedup store failed", Err: err}
		}
		if !fresh {
			return Result{Outcome: Duplicate, Status: http.StatusOK}
		}
	}
	if err := r.run(ctx, h, Event{ID: id, Timestamp: ts, Body: req.Body}); err != nil {
		return Result{Outcome: Failed, Status: http.StatusInternalServerError, Reason: "handler failed", Err: err}
	}
	return Result{Outcome: Handled, Status: http.StatusOK}
}

// run calls h; if it fails or panics the claim is released (and a panic
// goes on up), so the event is not lost to the dedup.
func (r *Receiver) run(ctx context.Context, h HandlerFunc, ev Event) (err error) {
	if h == nil {
		return nil
	}
	ok := false
	defer func() {
		if !ok && r.dedup != nil {
			r.dedup.Release(ev.ID)
		}
	}()
	err = h(ctx, ev)
	ok = err == nil
	return err
}

func rejected(err error) Result {
	res := Result{Outcome: Rejected, Status: http.StatusBadRequest, Err: err}
	for _, e := range []error{webhook.ErrMissingHeaders, webhook.ErrInvalidTimestamp, webhook.ErrTooOld, webhook.ErrTooNew, webhook.ErrNoMatch} {
		if errors.Is(err, e) {
			res.Reason = e.Error()
		}
	}
	if errors.Is(err, webhook.ErrNoMatch) {
		res.Status = http.StatusUnauthorized
	}
	return res
}

func (r *Receiver) enter(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.busy[id]; ok {
		return false
	}
	r.busy[id] = struct{}{}
	return true
}

func (r *Receiver) leave(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.busy, id)
}

// Len returns how many event ids the in-memory dedup remembers (0 for any
// other dedup).
func (r *Receiver) Len() int {
	if m, ok := r.dedup.(*MemoryDedup); ok {
		return m.Len()
	}
	return 0
}

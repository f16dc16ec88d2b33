package sim

import (
	"bytes"
	"context"
	"encoding"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The settings probe: every run also asks the engine to validate a few
// configurations one setting away from its own, with that setting at an
// edge of its documented range (scenarios/SCHEMA.md), and judges the
// answers against the ranges written down here, not against Validate: a
// value inside its range must be accepted, one outside refused, naming the
// setting at fault. A run only ever uses valid settings, so without the
// probe an engine that accepted a zero retry limit or a lease no longer
// than its timeout would never be caught (settings-validation).

// settingRule is one documented range, in the order the engine reports
// them (the first broken one is the one named).
type settingRule struct {
	field string // engine.Config field, as engine.ConfigError names it
	ok    func(c engine.Config) bool
	rng   string // the range, for the report
}

// settingBounds: for a range relative to other settings, the limit the
// value is judged against, which a refusal must quote (the user reading it
// cannot otherwise see what to set it to).
var settingBounds = map[string]func(c engine.Config) time.Duration{
	"MaxBackoff": func(c engine.Config) time.Duration { return c.InitialBackoff },
	"Lease":      func(c engine.Config) time.Duration { return c.WebhookTimeout },
	"AckDelay":   func(c engine.Config) time.Duration { return c.Lease - c.WebhookTimeout },
}

var settingRules = []settingRule{
	// What the runtime injects: a name, a clock, and a random source
	// whenever there is jitter to draw.
	{"Node", func(c engine.Config) bool { return c.Node != "" }, "not empty"},
	{"Clock", func(c engine.Config) bool { return c.Clock != nil }, "set"},
	{"Rand", func(c engine.Config) bool { return c.Rand != nil || c.JitterFraction <= 0 }, "set when jitter is above 0"},
	{"MaxAttempts", func(c engine.Config) bool { return c.MaxAttempts >= 1 }, "at least 1"},
	{"InitialBackoff", func(c engine.Config) bool { return c.InitialBackoff > 0 }, "positive"},
	{"Multiplier", func(c engine.Config) bool {
		return c.Multiplier >= 1 && !math.IsNaN(c.Multiplier) && !math.IsInf(c.Multiplier, 0)
	}, "a finite number >= 1"},
	{"MaxBackoff", func(c engine.Config) bool { return c.MaxBackoff >= c.InitialBackoff }, "at least initial_backoff"},
	{"JitterFraction", func(c engine.Config) bool { return c.JitterFraction >= 0 && c.JitterFraction <= 1 }, "0 to 1"},
	{"BreakerFailures", func(c engine.Config) bool { return c.BreakerFailures >= 1 }, "at least 1"},
	{"BreakerOpenFor", func(c engine.Config) bool { return c.BreakerOpenFor > 0 }, "positive"},
	{"BreakerCloseAfter", func(c engine.Config) bool { return c.BreakerCloseAfter >= 1 }, "at least 1"},
	{"ClockSkewBudget", func(c engine.Config) bool { return c.ClockSkewBudget >= 0 }, "not negative"},
	{"RetentionTTL", func(c engine.Config) bool { return c.RetentionTTL > 0 }, "positive"},
	{"RetentionMax", func(c engine.Config) bool { return c.RetentionMax >= 1 }, "at least 1"},
	{"CleanupInterval", func(c engine.Config) bool { return c.CleanupInterval > 0 }, "positive"},
	{"WebhookTimeout", func(c engine.Config) bool { return c.WebhookTimeout > 0 }, "positive"},
	{"Lease", func(c engine.Config) bool { return c.Lease > c.WebhookTimeout }, "above webhook_timeout"},
	{"MaxInFlightPerBot", func(c engine.Config) bool { return c.MaxInFlightPerBot >= 1 }, "at least 1"},
	{"TimestampLookback", func(c engine.Config) bool { return c.TimestampLookback >= 0 }, "not negative"},
	{"StoreRetry", func(c engine.Config) bool { return c.StoreRetry > 0 }, "positive"},
	{"CursorMode", func(c engine.Config) bool {
		return c.CursorMode == engine.CursorSync || c.CursorMode == engine.CursorAsync
	}, "sync or async"},
	{"AckDelay", func(c engine.Config) bool { return c.AckDelay >= 0 && c.AckDelay < c.Lease-c.WebhookTimeout }, "0 up to below lease - webhook_timeout"},
	{"HandOff", func(c engine.Config) bool {
		return c.HandOff == engine.HandOffQueued || c.HandOff == engine.HandOffDirect
	}, "queued or direct"},
}

// settingsProbes is how many configurations each run probes.
const settingsProbes = 3

// edgeValues are the values a probe may give field: both sides of each
// edge of its range, relative to the run's own configuration where the
// range is.
func edgeValues(field string, c engine.Config) []any {
	d := func(ds ...time.Duration) []any {
		out := make([]any, len(ds))
		for i, v := range ds {
			out[i] = v
		}
		return out
	}
	switch field {
	case "Node":
		return []any{"", "n"}
	case "Clock":
		return []any{impl.Clock(nil), impl.Clock(c.Clock)}
	case "Rand":
		return []any{(*rand.Rand)(nil), c.Rand}
	case "MaxBackoff":
		return d(c.InitialBackoff-1, c.InitialBackoff, c.InitialBackoff+1)
	case "Lease":
		return d(c.WebhookTimeout-1, c.WebhookTimeout, c.WebhookTimeout+1)
	case "AckDelay":
		gap := c.Lease - c.WebhookTimeout
		return d(-1, 0, gap-1, gap)
	case "Multiplier":
		return []any{math.Nextafter(1, 0), 1.0, math.NaN(), math.Inf(1), 2.0}
	case "JitterFraction":
		return []any{-0.001, 0.0, 1.0, 1.001, math.NaN()}
	case "CursorMode":
		return []any{engine.CursorMode(-1), engine.CursorSync, engine.CursorAsync, engine.CursorMode(2)}
	case "HandOff":
		return []any{engine.HandOff(-1), engine.HandOffQueued, engine.HandOffDirect, engine.HandOff(2)}
	}
	f, _ := reflect.TypeOf(c).FieldByName(field)
	if f.Type == reflect.TypeOf(time.Duration(0)) {
		return d(-1, 0, 1, time.Second)
	}
	return []any{-1, 0, 1, 2}
}

// settingsViolations probes settingsProbes configurations one setting away
// from base and reports each answer that breaks the documented ranges.
func settingsViolations(seed uint64, base engine.Config, at time.Time, step int64) []oracle.Violation {
	return probeSettings(seed, base, at, step, construct)
}

// construct is how a user meets validation: engine.New refuses what
// Validate does, before anything runs.
func construct(c engine.Config) error {
	_, err := engine.New(c, memstore.New())
	return err
}

// probeSettings is settingsViolations with the validation under test given
// (tests plant a faulty one).
func probeSettings(seed uint64, base engine.Config, at time.Time, step int64, validate func(engine.Config) error) []oracle.Violation {
	r := actorRand(seed, "settings-probe")
	base.Node, base.Clock, base.Rand, base.CrashHook = "probe", fixedClock(at), rand.New(rand.NewPCG(seed, 1)), nil
	var out []oracle.Violation
	for range settingsProbes {
		rule := settingRules[r.IntN(len(settingRules))]
		vals := edgeValues(rule.field, base)
		v := vals[r.IntN(len(vals))]
		c := base
		fv := reflect.ValueOf(&c).Elem().FieldByName(rule.field)
		if v == nil || (reflect.ValueOf(v).Kind() == reflect.Pointer && reflect.ValueOf(v).IsNil()) {
			fv.Set(reflect.Zero(fv.Type()))
		} else {
			fv.Set(reflect.ValueOf(v))
		}
		want := ""
		for _, sr := range settingRules {
			if !sr.ok(c) {
				want = sr.field
				break
			}
		}
		err := validate(c)
		var ce *engine.ConfigError
		detail := ""
		switch {
		case want == "" && err != nil:
			detail = fmt.Sprintf("refused %s=%v, which is inside every documented range: %v", rule.field, v, err)
		case want != "" && err == nil:
			detail = fmt.Sprintf("accepted %s=%v, which leaves %s outside its range (%s)", rule.field, v, want, ruleOf(want).rng)
		case want != "" && !errors.As(err, &ce):
			detail = fmt.Sprintf("refused %s=%v without naming a setting: %v", rule.field, v, err)
		case want != "" && ce.Field != want:
			detail = fmt.Sprintf("refused %s=%v naming %s, but the setting outside its range is %s (%s): %v", rule.field, v, ce.Field, want, ruleOf(want).rng, err)
		case want != "" && settingBounds[want] != nil && !strings.Contains(ce.Msg, settingBounds[want](c).String()):
			detail = fmt.Sprintf("refused %s=%v naming %s, but its message does not quote the bound %v it is judged against (%s): %v", rule.field, v, want, settingBounds[want](c), ruleOf(want).rng, err)
		default:
			if tm, ok := v.(encoding.TextMarshaler); ok {
				detail = enumTextFault(rule.field, v, rule.ok(c), tm.MarshalText, func(b []byte) (any, error) {
					p := reflect.New(reflect.TypeOf(v))
					err := p.Interface().(encoding.TextUnmarshaler).UnmarshalText(b)
					return p.Elem().Interface(), err
				})
			}
			if detail == "" {
				continue
			}
		}
		out = append(out, probeFailed(at, step, "%s", detail)...)
	}
	return out
}

// enumTextFault judges the text form of an enum setting (CursorMode,
// HandOff): a scenario file names them (`cursor_mode: async`), and a
// written-out run (the minimizer's, `sweep --artifacts`) writes them with
// MarshalText. A value inside the enum (inside) must marshal without error
// to a text that unmarshals back to the same value; one outside must be
// refused with an error, not a panic and not a name. It returns the
// violation's detail, or "".
func enumTextFault(field string, v any, inside bool, marshal func() ([]byte, error), unmarshal func([]byte) (any, error)) (detail string) {
	defer func() {
		if r := recover(); r != nil {
			detail = fmt.Sprintf("writing %s=%v as text panicked: %v", field, v, r)
		}
	}()
	b, err := marshal()
	switch {
	case inside && err != nil:
		return fmt.Sprintf("%s=%v, inside its range, cannot be written as text: %v", field, v, err)
	case !inside && err == nil:
		return fmt.Sprintf("%s=%v, outside its range, was written as text %q instead of refused", field, v, b)
	case !inside:
		return ""
	}
	back, err := unmarshal(b)
	if err != nil || back != v {
		return fmt.Sprintf("%s=%v written as text %q reads back as %v (%v)", field, v, b, back, err)
	}
	return ""
}

// probeFailed is the one settings-validation violation a probe reports.
func probeFailed(at time.Time, step int64, format string, args ...any) []oracle.Violation {
	return []oracle.Violation{{Invariant: oracle.InvSettingsValidation, Time: at, Step: step, Detail: fmt.Sprintf(format, args...)}}
}

// probeKey is the receiver probes' signing secret.
var probeKey = []byte("probe-secret-0123456789")

func ruleOf(field string) settingRule {
	for _, r := range settingRules {
		if r.field == field {
			return r
		}
	}
	return settingRule{field: field, rng: "?"}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// receiverViolations probes the receiver SDK's configuration the same way,
// once per run: a numeric bound at -1, 0 or 1 (negative refused, 0 the
// default), the secrets list empty, holding an empty key or a good one
// (to New, and to SetSecrets on a live receiver: a key rotation), or a
// secret in the whsec_ form, well-formed or not base64; or a signed
// request through the HTTP Handler with a body of exactly MaxBody bytes
// (handled) or one more (413, the handler not run).
func receiverViolations(seed uint64, at time.Time, step int64) []oracle.Violation {
	r := actorRand(seed, "settings-probe/receiver")
	key := probeKey
	cfg := receiver.Config{Secrets: [][]byte{key}, Tolerance: receiver.DefaultTolerance}
	what, ok, secrets := "", true, false
	switch k := r.IntN(7); k {
	case 0, 1, 2, 3:
		v := int64(r.IntN(3)) - 1
		name := [...]string{"Tolerance", "Window", "MaxEntries", "MaxBody"}[k]
		switch k {
		case 0:
			cfg.Tolerance = time.Duration(v)
		case 1:
			cfg.Window = time.Duration(v)
		case 2:
			cfg.MaxEntries = int(v)
		case 3:
			cfg.MaxBody = v
		}
		what, ok = fmt.Sprintf("%s=%d", name, v), v >= 0
	case 4:
		secrets = true
		switch r.IntN(3) {
		case 0:
			cfg.Secrets, what, ok = nil, "no secrets", false
		case 1:
			cfg.Secrets, what, ok = [][]byte{key, {}}, "an empty secret beside a good one", false
		default:
			what = "one good secret"
		}
	case 5:
		return bodyLimitViolations(r, key, at, step)
	default:
		s, good := webhook.FormatSecret(key), true
		if r.IntN(2) == 0 {
			s, good = webhook.SecretPrefix+"not*base64", false
		}
		_, err := receiver.ParseSecrets(webhook.FormatSecret(key), s)
		if (err == nil) != good {
			return probeFailed(at, step, "receiver.ParseSecrets(%q): error %v, want an error: %v", s, err, !good)
		}
		return nil
	}
	_, err := receiver.New(cfg)
	if (err == nil) != ok {
		return probeFailed(at, step, "receiver.New with %s: error %v, want an error: %v", what, err, !ok)
	}
	if secrets {
		// A key rotation on a live receiver must check the new secrets as
		// New does (the rotation keeps the dedup memory, so a bad list
		// would leave a receiver that rejects everything).
		live, lerr := receiver.New(receiver.Config{Secrets: [][]byte{key}})
		if lerr != nil {
			return probeFailed(at, step, "receiver.New with one good secret: %v", lerr)
		}
		if err := live.SetSecrets(cfg.Secrets); (err == nil) != ok {
			return probeFailed(at, step, "Receiver.SetSecrets with %s: error %v, want an error: %v", what, err, !ok)
		}
	}
	return nil
}

// bodyLimitViolations sends one signed request through the receiver's HTTP
// Handler with a body at its MaxBody or one byte over.
func bodyLimitViolations(r *rand.Rand, key []byte, at time.Time, step int64) []oracle.Violation {
	max := int64(64 + r.IntN(64))
	rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{key}, MaxBody: max, Now: func() time.Time { return at }})
	if err != nil {
		return probeFailed(at, step, "receiver.New with MaxBody=%d: %v", max, err)
	}
	n := max + int64(r.IntN(2))
	body := bytes.Repeat([]byte("x"), int(n))
	req := signedRequest(key, "probe-body", at, body)
	ran := false
	w := httptest.NewRecorder()
	rcv.Handler(func(context.Context, receiver.Event) error { ran = true; return nil }).ServeHTTP(w, req)
	want, wantRun := http.StatusOK, true
	if n > max {
		want, wantRun = http.StatusRequestEntityTooLarge, false
	}
	if w.Code != want || ran != wantRun {
		return probeFailed(at, step, "a signed %d-byte body with MaxBody=%d was answered %d (handler ran: %v), want %d (handler ran: %v)", n, max, w.Code, ran, want, wantRun)
	}
	return nil
}

// receiverContractViolations exercises, once per run, one promise of the
// receiver SDK a simulated delivery cannot reach: the webhook-id being
// handled answers a second request for it with 409 and Retry-After (the
// simulator never runs two handlers of one id at once); a handler that
// panics gives its id back, so a retry runs it again; an id is remembered
// for exactly Window (a duplicate one nanosecond before is dropped, one
// at Window is handled); a dedup store that fails is answered 503 with
// Retry-After and no handler run; behind the Middleware, a handler's
// answer at the top of the 2xx range (299) is a success that keeps the id.
func receiverContractViolations(seed uint64, at time.Time, step int64) []oracle.Violation {
	r := actorRand(seed, "settings-probe/receiver-contract")
	key := probeKey
	window := time.Second + time.Duration(r.Int64N(int64(time.Minute)))
	now := at
	rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{key}, Window: window, MaxEntries: 100, Now: func() time.Time { return now }})
	if err != nil {
		return probeFailed(at, step, "receiver.New: %v", err)
	}
	send := func(h receiver.HandlerFunc) *httptest.ResponseRecorder {
		req := signedRequest(key, "probe-contract", now, []byte(`{"probe":true}`))
		w := httptest.NewRecorder()
		rcv.Handler(h).ServeHTTP(w, req)
		return w
	}
	bad := func(format string, args ...any) []oracle.Violation {
		return probeFailed(at, step, "receiver contract: "+format, args...)
	}
	runs := 0
	count := func(context.Context, receiver.Event) error { runs++; return nil }
	switch r.IntN(5) {
	case 3: // the dedup store fails
		rcv, _ = receiver.New(receiver.Config{Secrets: [][]byte{key}, Dedup: failingDedup{}, Now: func() time.Time { return now }})
		w := send(count)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || runs != 0 {
			return bad("with its dedup store failing, a request was answered %d (Retry-After %q) with %d handler runs; want 503 with Retry-After and none", w.Code, w.Header().Get("Retry-After"), runs)
		}
	case 4: // 299 is a success behind the Middleware
		mw := rcv.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs++
			w.WriteHeader(299)
		}))
		for range 2 {
			mw.ServeHTTP(httptest.NewRecorder(), signedRequest(key, "probe-299", now, []byte(`{"probe":true}`)))
		}
		if runs != 1 {
			return bad("behind the Middleware a handler that answered 299 ran %d times for two requests of one id; a 2xx keeps the id (want 1)", runs)
		}
	case 0: // the same id again while its handler runs
		var inner *httptest.ResponseRecorder
		outer := send(func(ctx context.Context, ev receiver.Event) error {
			runs++
			inner = send(count)
			return nil
		})
		if outer.Code != http.StatusOK || inner == nil || inner.Code != http.StatusConflict || inner.Header().Get("Retry-After") == "" || runs != 1 {
			code, retry := 0, ""
			if inner != nil {
				code, retry = inner.Code, inner.Header().Get("Retry-After")
			}
			return bad("a request for an id whose handler was running was answered %d (Retry-After %q), the first %d, handler runs %d; want 409 with Retry-After, 200, 1 run", code, retry, outer.Code, runs)
		}
	case 1: // a panicking handler gives the id back
		func() {
			defer func() { _ = recover() }()
			send(func(context.Context, receiver.Event) error { panic("probe") })
		}()
		if w := send(count); w.Code != http.StatusOK || runs != 1 {
			return bad("after a handler panicked, the retry was answered %d with %d handler runs; want 200 and a run (the id must be given back)", w.Code, runs)
		}
	default: // the window's exact end
		send(count)
		now = at.Add(window - 1)
		send(count)
		if runs != 1 {
			return bad("a duplicate %s after the first handling (Window %s) ran the handler again", window-1, window)
		}
		now = at.Add(window)
		send(count)
		if runs != 2 {
			return bad("a request exactly Window (%s) after the first handling was not handled again", window)
		}
	}
	return nil
}

// failingDedup is a dedup store that is down.
type failingDedup struct{}

func (failingDedup) Claim(context.Context, string, time.Time) (bool, error) {
	return false, errors.New("probe: dedup store down")
}

func (failingDedup) Release(string) {}

// signedRequest is a webhook request for id, signed with key at time at.
func signedRequest(key []byte, id string, at time.Time, body []byte) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, webhook.Sign(key, id, at.Unix(), body))
	return req
}

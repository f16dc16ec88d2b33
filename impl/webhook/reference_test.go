package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

// The differential test: webhook.Verifier must decide every request as the
// Standard Webhooks reference library (Go, v0.0.1) does — accept or reject,
// and for a rejection the same class of error.
//
// The library reads the wall clock, so a case's timestamp is written
// relative to now: "@" in a timestamp template stands for now.Unix()+delta.
// In a signature template "{sig}" stands for the correct base64 signature
// (without "v1,") and "{other}" for one under a different key.

// refClass names the library's error class ("" = accepted).
func refClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, standardwebhooks.ErrRequiredHeaders):
		return "missing"
	case errors.Is(err, standardwebhooks.ErrInvalidHeaders):
		return "timestamp"
	case errors.Is(err, standardwebhooks.ErrMessageTooOld):
		return "old"
	case errors.Is(err, standardwebhooks.ErrMessageTooNew):
		return "new"
	case errors.Is(err, standardwebhooks.ErrNoMatchingSignature):
		return "nomatch"
	}
	return "other: " + err.Error()
}

func ourClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, webhook.ErrMissingHeaders):
		return "missing"
	case errors.Is(err, webhook.ErrInvalidTimestamp):
		return "timestamp"
	case errors.Is(err, webhook.ErrTooOld):
		return "old"
	case errors.Is(err, webhook.ErrTooNew):
		return "new"
	case errors.Is(err, webhook.ErrNoMatch):
		return "nomatch"
	}
	return "other: " + err.Error()
}

// diffCase is one request. Secrets are whsec_ strings; several mean the
// receiver is rotating (the library, which takes one secret, accepts when
// any of its instances does).
type diffCase struct {
	name    string
	secrets []string
	signKey string // key that signs {sig}; default secrets[0]
	id      string
	ts      string // template; "@" = now.Unix()+delta
	delta   int64
	sig     string // template
	body    string
	header  func(h http.Header) // optional raw edits after the three are set
}

const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_c2Vjb25kLXNlY3JldC1rZXktZm9yLXJvdGF0aW9u"
)

type outcome struct {
	ref, ours string
	stable    bool // ours gave the same answer just before and just after the library ran
}

// decide runs one case through the library and through Verifier, with the
// timestamp filled in from one reading of the clock.
func decide(t testing.TB, c diffCase) outcome {
	keys := make([][]byte, len(c.secrets))
	refs := make([]*standardwebhooks.Webhook, len(c.secrets))
	for i, s := range c.secrets {
		k, err := webhook.ParseSecret(s)
		_, rerr := standardwebhooks.NewWebhook(s)
		require.Equal(t, rerr == nil, err == nil, "secret %q: library and ParseSecret disagree", s)
		if err != nil {
			return outcome{ref: "bad secret", ours: "bad secret", stable: true}
		}
		keys[i] = k
		refs[i], _ = standardwebhooks.NewWebhook(s)
	}
	signKey := keys[0]
	if c.signKey != "" {
		signKey, _ = webhook.ParseSecret(c.signKey)
	}
	before := time.Now()
	ts := strings.ReplaceAll(c.ts, "@", strconv.FormatInt(before.Unix()+c.delta, 10))
	tsn, _ := strconv.ParseInt(ts, 10, 64)
	sig := webhook.Sign(signKey, c.id, tsn, []byte(c.body))[3:]
	other := webhook.Sign([]byte("a different key"), c.id, tsn, []byte(c.body))[3:]
	sigHdr := strings.NewReplacer("{sig}", sig, "{other}", other).Replace(c.sig)

	h := http.Header{}
	h.Set(webhook.HeaderID, c.id)
	h.Set(webhook.HeaderTimestamp, ts)
	h.Set(webhook.HeaderSignature, sigHdr)
	if c.header != nil {
		c.header(h)
	}
	body := []byte(c.body)

	ref := "?"
	for _, wh := range refs {
		cl := refClass(wh.Verify(body, h))
		if ref == "?" || cl == "" {
			ref = cl
		}
	}
	after := time.Now()
	v := webhook.Verifier{Secrets: keys}
	_, e1 := v.Verify(before, webhook.HeadersOf(h), body)
	_, e2 := v.Verify(after, webhook.HeadersOf(h), body)
	return outcome{ref: ref, ours: ourClass(e1), stable: ourClass(e1) == ourClass(e2)}
}

// compare decides c, retrying when the clock crossed a boundary between the
// two readings (our answer changed while the library ran).
func compare(t testing.TB, c diffCase) outcome {
	for range 5 {
		if o := decide(t, c); o.stable {
			return o
		}
	}
	t.Fatalf("%s: the answer kept changing across the clock reading", c.name)
	return outcome{}
}

func diffCases() []diffCase {
	one := []string{secretA}
	cs := []diffCase{
		{name: "valid", sig: "v1,{sig}"},
		{name: "timestamp exactly 300 s old", delta: -300, sig: "v1,{sig}"},
		{name: "timestamp 299 s old", delta: -299, sig: "v1,{sig}"},
		{name: "timestamp 301 s old", delta: -301, sig: "v1,{sig}"},
		{name: "timestamp 300 s ahead", delta: 300, sig: "v1,{sig}"},
		{name: "timestamp 301 s ahead", delta: 301, sig: "v1,{sig}"},
		{name: "tab between signatures", sig: "v1,{other}\tv1,{sig}"},
		{name: "space between signatures", sig: "v1,{other} v1,{sig}"},
		{name: "two spaces between signatures", sig: "v1,{other}  v1,{sig}"},
		{name: "v1,<sig>,extra", sig: "v1,{sig},extra"},
		{name: "empty webhook-id", id: "-", sig: "v1,{sig}"},
		{name: "trailing newline in signature", sig: "v1,{sig}\n"},
		{name: "trailing space in signature", sig: "v1,{sig} "},
		{name: "leading space in signature", sig: " v1,{sig}"},
		{name: "v2 version", sig: "v2,{sig}"},
		{name: "V1 upper case", sig: "V1,{sig}"},
		{name: "no version", sig: "{sig}"},
		{name: "only a wrong signature", sig: "v1,{other}"},
		{name: "v1 with empty signature", sig: "v1,"},
		{name: "empty signature header", sig: ""},
		{name: "empty timestamp", ts: "-", sig: "v1,{sig}"},
		{name: "timestamp with plus sign", ts: "+@", sig: "v1,{sig}"},
		{name: "timestamp with leading zero", ts: "0@", sig: "v1,{sig}"},
		{name: "timestamp with fraction", ts: "@.5", sig: "v1,{sig}"},
		{name: "timestamp with space", ts: " @", sig: "v1,{sig}"},
		{name: "timestamp not a number", ts: "yesterday", sig: "v1,{sig}"},
		{name: "timestamp overflows int64", ts: "99999999999999999999", sig: "v1,{sig}"},
		{name: "timestamp max int64", ts: "9223372036854775807", sig: "v1,{sig}"},
		{name: "timestamp min int64", ts: "-9223372036854775808", sig: "v1,{sig}"},
		{name: "timestamp zero", ts: "0", sig: "v1,{sig}"},
		{name: "tampered body", sig: "v1,{sig}", header: nil, body: "x"},
		{name: "signature header given twice (first used)", sig: "v1,{other}",
			header: func(h http.Header) { h.Add(webhook.HeaderSignature, "v1,{sig}") }},
		{name: "lower-case map key is not found by Get", sig: "v1,{sig}",
			header: func(h http.Header) {
				v := h.Get(webhook.HeaderID)
				h.Del(webhook.HeaderID)
				h["webhook-id"] = []string{v}
			}},
		{name: "comma-separated signatures", sig: "v1,{other},v1,{sig}"},
		{name: "unicode id", id: "évènement-✓", sig: "v1,{sig}"},
		{name: "id with dots", id: "a.b.c", sig: "v1,{sig}"},
		{name: "rotation: old key signs", secrets: []string{secretA, secretB}, signKey: secretA, sig: "v1,{sig}"},
		{name: "rotation: new key signs", secrets: []string{secretA, secretB}, signKey: secretB, sig: "v1,{sig}"},
		{name: "rotation: neither signs", secrets: []string{secretA, secretB}, signKey: "whsec_b3RoZXI=", sig: "v1,{sig}"},
		{name: "secret without prefix", secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, sig: "v1,{sig}"},
		{name: "secret not base64", secrets: []string{"whsec_not*base64"}, sig: "v1,{sig}"},
	}
	for i := range cs {
		c := &cs[i]
		if c.secrets == nil {
			c.secrets = one
		}
		switch c.id {
		case "":
			c.id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		case "-":
			c.id = ""
		}
		switch c.ts {
		case "":
			c.ts = "@"
		case "-":
			c.ts = ""
		}
		if c.body == "" {
			c.body = `{"test": 2432232314}`
		}
		if c.name == "tampered body" {
			// Sign one body, send another.
			c.header = nil
			c.sig = "v1,{sig}"
		}
	}
	return cs
}

func TestVerifyAgreesWithReferenceLibrary(t *testing.T) {
	cases := diffCases()
	require.GreaterOrEqual(t, len(cases), 27)
	accepted := 0
	for _, c := range cases {
		o := compare(t, c)
		if o.ref == "" {
			accepted++
		}
		if o.ref != o.ours {
			t.Errorf("%s: library %q, Verifier %q", c.name, o.ref, o.ours)
		}
	}
	t.Logf("%d cases compared with the reference library (%d accepted by it, %d rejected)", len(cases), accepted, len(cases)-accepted)
	require.Greater(t, accepted, 5, "the cases must exercise acceptance too")
}

// The reference library's signature is the engine's, byte for byte.
func TestSignMatchesReferenceLibrary(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(secretA)
	require.NoError(t, err)
	key, err := webhook.ParseSecret(secretA)
	require.NoError(t, err)
	for i, id := range []string{"", "msg_1", "a.b", "évè"} {
		ts := int64(1614265330 + i*977)
		body := []byte(strings.Repeat("payload ", i*9))
		want, err := wh.Sign(id, time.Unix(ts, 0), body)
		require.NoError(t, err)
		require.Equal(t, want, webhook.Sign(key, id, ts, body))
	}
}

// FuzzVerifyAgainstReference draws requests (secret, id, timestamp text,
// signature text, body) and requires the same decision as the library.
// Templates make acceptance reachable: "@" in ts is now.Unix()+delta,
// "{sig}" in sig is the correct signature.
func FuzzVerifyAgainstReference(f *testing.F) {
	for _, c := range diffCases() {
		f.Add(c.secrets[0], c.id, c.ts, int64(c.delta), c.sig, []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, secret, id, ts string, delta int64, sig string, body []byte) {
		// Keep delta where now.Unix()+delta does not overflow; the library
		// itself is fed extreme timestamps through ts.
		delta %= 1 << 40
		c := diffCase{name: "fuzz", secrets: []string{secret}, id: id, ts: ts, delta: delta, sig: sig, body: string(body)}
		o := compare(t, c)
		if o.ref != o.ours {
			t.Fatalf("library %q, Verifier %q for id=%q ts=%q delta=%d sig=%q body=%q secret=%q", o.ref, o.ours, id, ts, delta, sig, body, secret)
		}
	})
}

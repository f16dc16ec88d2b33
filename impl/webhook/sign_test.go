package webhook

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Standard Webhooks specification's published example: secret
// whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id msg_p5jXN8AQM9LWM0D4loKWxJek,
// timestamp 1614265330, body {"test": 2432232314}.
func TestSignMatchesStandardWebhooksExample(t *testing.T) {
	secret, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	got := Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	assert.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
}

func TestSignFormatAndSensitivity(t *testing.T) {
	s := Sign([]byte("k"), "id", 10, []byte("body"))
	require.True(t, strings.HasPrefix(s, "v1,"))
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "v1,"))
	require.NoError(t, err)
	assert.Len(t, raw, 32, "HMAC-SHA256")
	assert.NotEqual(t, s, Sign([]byte("k2"), "id", 10, []byte("body")))
	assert.NotEqual(t, s, Sign([]byte("k"), "id2", 10, []byte("body")))
	assert.NotEqual(t, s, Sign([]byte("k"), "id", 11, []byte("body")))
	assert.NotEqual(t, s, Sign([]byte("k"), "id", 10, []byte("body2")))
	// The dots separate the parts: moving one across a boundary changes it.
	assert.NotEqual(t, Sign([]byte("k"), "a.1", 2, []byte("x")), Sign([]byte("k"), "a", 12, []byte("x")))
}

// A signer reused across requests restores its keyed state on each call;
// every signature must equal a freshly keyed one.
func TestReusedSignerMatchesSign(t *testing.T) {
	secret := []byte("a secret longer than nothing")
	sg := NewSigner(secret)
	for i := range 50 {
		id := strings.Repeat("e", i%7) + string(rune('a'+i%26))
		body := []byte(strings.Repeat("payload-", i))
		ts := int64(1700000000 + i)
		require.Equal(t, Sign(secret, id, ts, body), sg.Sign(id, ts, body), "request %d", i)
		require.Equal(t, "prefix|"+Sign(secret, id, ts, body), string(sg.AppendSign([]byte("prefix|"), id, ts, body)), "request %d", i)
	}
}

// Headers.Set and HeadersOf are http.Header's Set and Get of the three
// names, whatever case a sender used.
func TestHeadersAreHTTPHeaderSetAndGet(t *testing.T) {
	hs := Headers{ID: "msg_1", Timestamp: "1614265330", Signature: "v1,abc v1,def"}
	got, want := http.Header{}, http.Header{}
	hs.Set(got)
	want.Set(HeaderID, hs.ID)
	want.Set(HeaderTimestamp, hs.Timestamp)
	want.Set(HeaderSignature, hs.Signature)
	assert.Equal(t, want, got)
	assert.Equal(t, hs, HeadersOf(got))
	// The three values share one allocation: adding a second value to
	// one header leaves the others as they were.
	for _, name := range []string{HeaderID, HeaderTimestamp, HeaderSignature} {
		h := http.Header{}
		hs.Set(h)
		h.Add(name, "extra")
		w := want.Clone()
		w.Add(name, "extra")
		assert.Equal(t, w, h, name)
	}
	odd := http.Header{}
	odd.Add("WEBHOOK-ID", "a")
	odd.Add("webhook-id", "b")
	odd.Add("Webhook-Timestamp", "1")
	assert.Equal(t, Headers{ID: odd.Get(HeaderID), Timestamp: odd.Get(HeaderTimestamp), Signature: odd.Get(HeaderSignature)}, HeadersOf(odd))
	assert.Equal(t, Headers{}, HeadersOf(http.Header{}))
}

package receiver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

func post(t *testing.T, h http.Handler, hs webhook.Headers, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	hs.Set(req.Header)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestMiddlewareStatuses(t *testing.T) {
	now := t0.Add(2 * time.Second)
	r := newRx(t, Config{Now: func() time.Time { return now }, MaxBody: 64})
	calls := 0
	status := http.StatusNoContent
	next := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		calls++
		ev, ok := EventFrom(req.Context())
		require.True(t, ok)
		b, _ := io.ReadAll(req.Body)
		assert.Equal(t, string(ev.Body), string(b), "the body is readable again")
		assert.Equal(t, t0.Unix(), ev.Timestamp)
		w.WriteHeader(status)
	})
	h := r.Middleware(next)
	good := webhook.NewHeaders(secret, "e1", t0.Unix(), []byte("hello"))

	assert.Equal(t, 204, post(t, h, good, "hello").Code, "next's answer passes through")
	assert.Equal(t, 200, post(t, h, good, "hello").Code, "duplicate: acknowledged")
	assert.Equal(t, 1, calls, "next does not run for a duplicate")

	assert.Equal(t, 401, post(t, h, good, "tampered").Code)
	missing := good
	missing.ID = ""
	assert.Equal(t, 400, post(t, h, missing, "hello").Code)
	stale := webhook.NewHeaders(secret, "e2", t0.Add(-301*time.Second).Unix(), []byte("x"))
	rec := post(t, h, stale, "x")
	assert.Equal(t, 400, rec.Code)
	assert.Contains(t, rec.Body.String(), "too old")
	assert.Equal(t, 413, post(t, h, good, strings.Repeat("x", 65)).Code)

	// next fails: the sender sees its status and the retry reaches next.
	status = http.StatusServiceUnavailable
	e3 := webhook.NewHeaders(secret, "e3", t0.Unix(), []byte("y"))
	assert.Equal(t, 503, post(t, h, e3, "y").Code)
	status = http.StatusOK
	assert.Equal(t, 200, post(t, h, e3, "y").Code)
	assert.Equal(t, 200, post(t, h, e3, "y").Code)
	assert.Equal(t, 3, calls)
}

func TestHandlerWrapper(t *testing.T) {
	now := t0
	r := newRx(t, Config{Now: func() time.Time { return now }})
	fail := true
	h := r.Handler(func(_ context.Context, ev Event) error {
		if fail {
			return assert.AnError
		}
		return nil
	})
	hs := webhook.NewHeaders(secret, "e", t0.Unix(), []byte("b"))
	rec := post(t, h, hs, "b")
	assert.Equal(t, 500, rec.Code)
	assert.NotContains(t, rec.Body.String(), assert.AnError.Error(), "internal errors are not sent back")
	fail = false
	assert.Equal(t, 200, post(t, h, hs, "b").Code)
	assert.Equal(t, 200, post(t, h, hs, "b").Code)
}

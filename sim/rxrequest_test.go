package sim

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// The hand-built webhook request is the one httptest builds, field for
// field, with the same body.
func TestNewWebhookRequestIsHTTPTests(t *testing.T) {
	for _, body := range [][]byte{nil, {}, []byte(`{"a":1}`), bytes.Repeat([]byte("x"), 5000)} {
		want := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
		got := newWebhookRequest(body).WithContext(context.Background())
		wb, _ := io.ReadAll(want.Body)
		gb, _ := io.ReadAll(got.Body)
		if !bytes.Equal(wb, gb) {
			t.Fatalf("body %q, httptest's %q", gb, wb)
		}
		want.Body, got.Body = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("request differs from httptest's:\n got %#v\nwant %#v", got, want)
		}
	}
}

// rxRecorder records what httptest.ResponseRecorder records of a response
// (its code and body, read by receive), for every sequence of writes a
// handler can make: nothing, a status, a body, a status after the body,
// two statuses, http.Error; and panics on an invalid code as it does.
func TestRxRecorderIsResponseRecorder(t *testing.T) {
	runs := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) {},
		func(w http.ResponseWriter) { w.WriteHeader(204) },
		func(w http.ResponseWriter) { _, _ = w.Write([]byte("ok")) },
		func(w http.ResponseWriter) { _, _ = w.Write([]byte("ok")); w.WriteHeader(500) },
		func(w http.ResponseWriter) {
			w.WriteHeader(409)
			w.WriteHeader(200)
			_, _ = w.Write([]byte("a"))
			_, _ = w.Write([]byte("b"))
		},
		func(w http.ResponseWriter) { http.Error(w, "nope", http.StatusUnauthorized) },
		func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, " busy ", http.StatusServiceUnavailable)
		},
		func(w http.ResponseWriter) { w.WriteHeader(200); w.WriteHeader(42) },
	}
	for i, run := range runs {
		want := httptest.NewRecorder()
		run(want)
		got := &rxRecorder{Code: http.StatusOK}
		run(got)
		if got.Code != want.Code || !bytes.Equal(got.body, want.Body.Bytes()) {
			t.Errorf("run %d: %d %q, ResponseRecorder %d %q", i, got.Code, got.body, want.Code, want.Body.Bytes())
		}
	}
	for _, code := range []int{0, 99, 1000} {
		panics := func(w http.ResponseWriter) (msg any) {
			defer func() { msg = recover() }()
			w.WriteHeader(code)
			return nil
		}
		if got, want := panics(&rxRecorder{Code: http.StatusOK}), panics(httptest.NewRecorder()); got != want {
			t.Errorf("WriteHeader(%d): panic %v, ResponseRecorder's %v", code, got, want)
		}
	}
}

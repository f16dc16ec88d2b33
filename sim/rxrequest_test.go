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

// The request and recorder an rxWire hands out again, after a delivery
// that read the body, set headers and answered, are new ones: the request
// newWebhookRequest builds, with the new body, and an empty recorder. One
// asked for while the last is out is a new one.
func TestRxWireReusesAsNew(t *testing.T) {
	var w rxWire
	for i, body := range [][]byte{[]byte(`{"a":1}`), nil, bytes.Repeat([]byte("x"), 5000), []byte("last")} {
		req, rec := w.next(body)
		want := newWebhookRequest(body)
		gb, _ := io.ReadAll(req.Body)
		wb, _ := io.ReadAll(want.Body)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("delivery %d: body %q, want %q", i, gb, wb)
		}
		gotBody := req.Body
		req.Body, want.Body = nil, nil
		if !reflect.DeepEqual(req, want) {
			t.Fatalf("delivery %d: reused request differs from a new one:\n got %#v\nwant %#v", i, req, want)
		}
		req.Body = gotBody
		if rec.Code != http.StatusOK || len(rec.body) != 0 || len(rec.header) != 0 || rec.wrote {
			t.Fatalf("delivery %d: reused recorder not new: %+v", i, rec)
		}
		if other, orec := w.next(body); other == req || orec == rec {
			t.Fatalf("delivery %d: the request in use was handed out again", i)
		}
		// What a delivery leaves behind.
		req.Header.Set("Webhook-Id", "x")
		req.Header.Set("X-Other", "y")
		rec.Header().Set("Retry-After", "1")
		http.Error(rec, "busy", http.StatusServiceUnavailable)
		w.done()
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

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

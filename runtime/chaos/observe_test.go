package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// TestObserveSettledWaitsForTheCursorWrite: an engine that writes its
// cursor just after the answers it covers shows the old cursor to the
// first readings after the settle; the reading judged is the one after the
// cursor moved and held still, whatever the machine's speed (the write
// lands after the third reading here, counted in readings, not time).
func TestObserveSettledWaitsForTheCursorWrite(t *testing.T) {
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		major := int64(1)
		if reads.Add(1) > 3 {
			major = 2
		}
		_ = json.NewEncoder(w).Encode(protocol.Observation{Cursors: []protocol.ObservedCursor{{Stream: "log-1", Pos: protocol.Position{Major: major}}}})
	}))
	defer srv.Close()
	h := &harness{rec: newRecorder(), listen: strings.TrimPrefix(srv.URL, "http://")}
	o := h.observeSettled(context.Background())
	if o == nil || len(o.Cursors) != 1 || o.Cursors[0].Pos.Major != 2 {
		t.Fatalf("after the settle: %+v; want the cursor the engine wrote after the third reading (major 2)", o)
	}
	if n := reads.Load(); n < 5 {
		t.Errorf("%d readings; want the cursor seen holding still after it moved", n)
	}
}

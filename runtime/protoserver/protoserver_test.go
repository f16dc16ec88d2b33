package protoserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

func get(t *testing.T, h http.Handler, target string) (int, protocol.Events) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	var b protocol.Events
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, b
}

// enteredFirst is h that closes entered as a request comes in.
func enteredFirst(entered chan struct{}, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		h.ServeHTTP(w, r)
	})
}

func ids(b protocol.Events) []string {
	var out []string
	for _, e := range b.Events {
		out = append(out, e.ID)
	}
	return out
}

// TestUpstreamReplayAndTail: after= replays strictly after a log
// position (sealing does not move events), next= continues without a gap
// or a repeat, from=head sees only new events, since= is coarse and
// inclusive on created_at, and every answer carries the registry version.
func TestUpstreamReplayAndTail(t *testing.T) {
	u, reg := NewUpstream(), NewRegistry()
	u.MaxWait = 10 * time.Minute // the long poll below wakes, or hangs
	u.Registry = reg
	u.AddStream("s", engine.LogStream)
	u.AddStream("ts", engine.TimestampStream)
	now := time.UnixMilli(1_000_000)
	for i, id := range []string{"a", "b", "c"} {
		u.Produce("s", id, []byte(id), now)
		if i == 0 {
			u.Seal("s") // a at (1,0); b, c at (2,0), (2,1)
		}
	}
	if _, b := get(t, u, "/v1/streams/s/events?after=1.0"); len(b.Events) != 2 || b.Events[0].ID != "b" || b.Events[0].Pos.Major != 2 {
		t.Fatalf("after=1.0 gave %v, want b@(2,0), c", ids(b))
	}
	_, b := get(t, u, "/v1/streams/s/events?after=0.0")
	if len(b.Events) != 3 || b.Next != 3 || b.RegistryVersion != reg.Version() {
		t.Fatalf("after=0.0: %v next %d version %d", ids(b), b.Next, b.RegistryVersion)
	}
	if _, h := get(t, u, "/v1/streams/s/events?from=head"); len(h.Events) != 0 || h.Next != 3 {
		t.Fatalf("from=head gave %v next %d, want nothing, next 3", ids(h), h.Next)
	}
	// The long poll's wait is a hang detector; the event is produced once
	// the request is in the handler (parked or about to be: either way the
	// answer is d, whatever the machine's load).
	done, entered := make(chan protocol.Events), make(chan struct{})
	go func() {
		_, b := get(t, enteredFirst(entered, u), "/v1/streams/s/events?next=3&wait=10m")
		done <- b
	}()
	<-entered
	start := time.Now()
	u.Produce("s", "d", []byte("d"), now)
	if b := <-done; len(b.Events) != 1 || b.Events[0].ID != "d" || b.Next != 4 {
		t.Fatalf("long poll gave %v next %d, want d, next 4", ids(b), b.Next)
	}
	if took := time.Since(start); took > 5*time.Minute { // a hang detector: the wait is 10m
		t.Errorf("the long poll answered %v after the produce: it did not wake", took)
	}
	u.Produce("ts", "late", nil, now.Add(-time.Second))
	u.Produce("ts", "on", nil, now)
	if _, b := get(t, u, "/v1/streams/ts/events?since=1000000"); len(b.Events) != 1 || b.Events[0].ID != "on" || b.Events[0].Pos.ID != "on" {
		t.Fatalf("since=1000000 gave %v, want only the event stamped at it", ids(b))
	}
	for _, bad := range []string{"/v1/streams/s/events", "/v1/streams/s/events?after=x", "/v1/streams/s/events?next=99", "/v1/streams/s/events?from=head&wait=soon"} {
		if code, _ := get(t, u, bad); code != 400 {
			t.Errorf("%s: status %d, want 400", bad, code)
		}
	}
	if code, _ := get(t, u, "/v1/streams/nope/events?from=head"); code != 404 {
		t.Errorf("unknown stream: status %d, want 404", code)
	}
}

func TestRegistryLongPoll(t *testing.T) {
	g := NewRegistry()
	g.MaxWait = 10 * time.Minute // the long poll below wakes, or hangs
	v := g.Version()
	done, entered := make(chan protocol.Registry), make(chan struct{})
	go func() {
		rec := httptest.NewRecorder()
		enteredFirst(entered, g).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/registry?after="+itoa(v)+"&wait=10m", nil))
		var r protocol.Registry
		_ = json.Unmarshal(rec.Body.Bytes(), &r)
		done <- r
	}()
	<-entered
	start := time.Now()
	g.AddMembership(protocol.Membership{Stream: "s", Bot: "b", Member: true})
	if r := <-done; r.Version <= v || len(r.Memberships) != 1 {
		t.Fatalf("long poll after %d gave version %d with %d memberships", v, r.Version, len(r.Memberships))
	}
	if took := time.Since(start); took > 5*time.Minute { // a hang detector: the wait is 10m
		t.Errorf("the long poll answered %v after the change: it did not wake", took)
	}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

// TestEmptyAnswerIsAnEmptyList: an answer with no events carries
// "events": [] (PROTOCOL.md), not null, so a client can iterate it as is.
func TestEmptyAnswerIsAnEmptyList(t *testing.T) {
	u := NewUpstream()
	u.AddStream("s1", engine.LogStream)
	rec := httptest.NewRecorder()
	u.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/streams/s1/events?from=head", nil))
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["events"]) != "[]" {
		t.Errorf(`empty answer: "events": %s; want []`, raw["events"])
	}
}

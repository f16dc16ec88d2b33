package runtime_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

// TestJoinBehindHeadBackfills: a bot that joins a log stream from behind
// the engine's head gets every event after its membership's start, also
// when the upstream batch produced after the join reaches the runtime
// before the registry's long poll does (the batch's registry_version makes
// the runtime catch up, which rewinds the stream: the batch that caused
// it belongs to the replaced subscription and must not be stepped, or the
// engine's head jumps past the events it must replay). Found by chaos's
// join behind the head; here the registry's long poll holds every answer
// that shows the join until the bots got their events, so the upstream
// always wins the race, however the machine schedules the two.
func TestJoinBehindHeadBackfills(t *testing.T) {
	up, reg := protoserver.NewUpstream(), protoserver.NewRegistry()
	up.Registry = reg
	var holdAbove atomic.Int64 // long-poll answers above this version wait for release
	holdAbove.Store(math.MaxInt64)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	heldReg := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.Query().Has("after") { // the catch-up read: never held
			reg.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, r)
		var snap protocol.Registry
		if json.Unmarshal(rec.Body.Bytes(), &snap) == nil && snap.Version > holdAbove.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
	us, rs := httptest.NewServer(up), httptest.NewServer(heldReg)
	t.Cleanup(us.Close)
	t.Cleanup(rs.Close)
	t.Cleanup(releaseAll) // before the servers close (cleanups run last first)
	w := &world{up: up, reg: reg, urls: [2]string{us.URL, rs.URL}}
	up.AddStream("s1", engine.LogStream)
	for i := range 2 {
		secret := []byte(fmt.Sprintf("secret-%d", i))
		b := newBot(t, secret, 0)
		srv := httptest.NewServer(b)
		t.Cleanup(srv.Close)
		id := fmt.Sprintf("bot-%d", i)
		reg.AddBot(protocol.Bot{ID: id, Secret: base64.StdEncoding.EncodeToString(secret), URL: srv.URL, HasKey: true})
		w.bots = append(w.bots, b)
	}
	reg.AddMembership(protocol.Membership{Stream: "s1", Kind: protocol.KindLog, Bot: "bot-0", Member: true})
	var pos []impl.Position
	produce := func(n int) {
		for range n {
			p, _ := up.Produce("s1", fmt.Sprintf("ev-%04d", len(pos)), []byte(fmt.Sprintf(`{"n":%d}`, len(pos))), time.Now())
			pos = append(pos, p)
			if len(pos)%7 == 0 {
				up.Seal("s1")
			}
		}
	}
	produce(20)
	r := start(t, w, memstore.New(), fastConfig())
	defer r.stop(t)
	waitBot(t, w.bots[0], 20)
	// bot-1 joins from event 9, behind the head; the next events are
	// produced at once, under the new registry version. It is owed events
	// 10 to 24. The long poll does not show the join until they arrived.
	holdAbove.Store(reg.Version())
	reg.AddMembership(protocol.Membership{Stream: "s1", Kind: protocol.KindLog, Bot: "bot-1", From: protocol.FromPos(pos[9]), Member: true})
	produce(5)
	waitBot(t, w.bots[1], 15)
	waitBot(t, w.bots[0], 25)
	releaseAll()
}

func waitBot(t *testing.T, b *bot, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang detector only
	for {
		if d, _ := b.count(); d >= n {
			return
		}
		if time.Now().After(deadline) {
			d, runs := b.count()
			t.Fatalf("the bot handled %d distinct events (%d runs), want %d", d, runs, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

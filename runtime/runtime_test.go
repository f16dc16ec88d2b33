package runtime_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/internal/pgtest"
	"github.com/deliverysim/deliverysim/runtime"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

// bot is a webhook server verifying with impl/receiver; failFirst makes
// its first n requests answer 500 (the handler does not run).
type bot struct {
	rcv       *receiver.Receiver
	mu        sync.Mutex
	handled   map[string]int
	requests  int
	failFirst int
}

func (b *bot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.requests++
	fail := b.requests <= b.failFirst
	b.mu.Unlock()
	if fail {
		http.Error(w, "injected", http.StatusInternalServerError)
		return
	}
	b.rcv.Handler(func(_ context.Context, ev receiver.Event) error {
		b.mu.Lock()
		b.handled[ev.ID]++
		b.mu.Unlock()
		return nil
	}).ServeHTTP(w, r)
}

func newBot(t *testing.T, secret []byte, failFirst int) *bot {
	t.Helper()
	rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{secret}})
	if err != nil {
		t.Fatal(err)
	}
	return &bot{rcv: rcv, handled: map[string]int{}, failFirst: failFirst}
}

func (b *bot) count() (distinct, runs int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.handled {
		distinct++
		runs += n
	}
	return
}

type world struct {
	up   *protoserver.Upstream
	reg  *protoserver.Registry
	bots []*bot
	urls [2]string
}

func newWorld(t *testing.T, nbots, failFirst int) *world {
	w := &world{up: protoserver.NewUpstream(), reg: protoserver.NewRegistry()}
	// Each batch carries the registry version it was served under, as
	// PROTOCOL.md asks: the runtime applies a membership added before an
	// event was produced before that event, however late its long poll.
	w.up.Registry = w.reg
	us, rs := httptest.NewServer(w.up), httptest.NewServer(w.reg)
	t.Cleanup(us.Close)
	t.Cleanup(rs.Close)
	w.urls = [2]string{us.URL, rs.URL}
	w.up.AddStream("s1", engine.LogStream)
	for i := range nbots {
		secret := []byte(fmt.Sprintf("secret-%d", i))
		b := newBot(t, secret, failFirst)
		srv := httptest.NewServer(b)
		t.Cleanup(srv.Close)
		id := fmt.Sprintf("bot-%d", i)
		w.reg.AddBot(protocol.Bot{ID: id, Secret: base64.StdEncoding.EncodeToString(secret), URL: srv.URL, HasKey: true})
		w.reg.AddMembership(protocol.Membership{Stream: "s1", Kind: protocol.KindLog, Bot: id, Member: true})
		w.bots = append(w.bots, b)
	}
	return w
}

func (w *world) produce(from, to int) {
	for i := from; i < to; i++ {
		w.up.Produce("s1", fmt.Sprintf("ev-%04d", i), []byte(fmt.Sprintf(`{"n":%d}`, i)), time.Now())
		if i%7 == 6 {
			w.up.Seal("s1")
		}
	}
}

func fastConfig() engine.Config {
	c := engine.DefaultConfig()
	c.InitialBackoff, c.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	c.WebhookTimeout, c.Lease = time.Second, 3*time.Second
	c.StoreRetry = 100 * time.Millisecond
	c.CleanupInterval = time.Second
	c.BreakerOpenFor = 200 * time.Millisecond
	c.MaxAttempts = 10
	return c
}

type running struct {
	cancel context.CancelFunc
	done   chan error
	m      *runtime.Metrics
}

func start(t *testing.T, w *world, store impl.Store, cfg engine.Config) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), m: runtime.NewMetrics()}
	ready := make(chan struct{})
	go func() {
		r.done <- runtime.Run(ctx, runtime.Options{
			Engine: cfg, Store: store, Upstream: w.urls[0], Registry: w.urls[1],
			Metrics: r.m, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PollWait: time.Second, SampleEvery: 100 * time.Millisecond,
			Ready: func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-r.done:
		t.Fatalf("runtime did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("runtime did not start within 30s")
	}
	return r
}

func (r *running) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run returned %v after a clean stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context ending")
	}
}

// waitAll waits (bounded) until every bot handled n distinct events.
func (w *world) waitAll(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // a hang detector only
	for {
		done := true
		for _, b := range w.bots {
			if d, _ := b.count(); d < n {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			for i, b := range w.bots {
				d, r := b.count()
				t.Errorf("bot-%d handled %d distinct events (%d runs), want %d", i, d, r, n)
			}
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scrape(t *testing.T, m *runtime.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return -1
}

func testDelivers(t *testing.T, store impl.Store, handoff engine.HandOff) {
	w := newWorld(t, 3, 4)
	cfg := fastConfig()
	cfg.HandOff = handoff
	r := start(t, w, store, cfg)
	w.produce(0, 60)
	w.waitAll(t, 60)
	r.stop(t) // the drain hands every answer to the engine
	text := scrape(t, r.m)
	if v := metricValue(text, "deliverysim_engine_acked_total"); v < 180 {
		t.Errorf("deliverysim_engine_acked_total = %v, want >= 180 (3 bots x 60 events)", v)
	}
	if v := metricValue(text, "deliverysim_engine_failed_total"); v < 4 {
		t.Errorf("deliverysim_engine_failed_total = %v, want >= 4 (each bot failed its first 4 requests)", v)
	}

	// A second process resumes from the durable cursor: new events reach
	// every bot, and nothing the first one delivered runs a handler twice.
	r = start(t, w, store, cfg)
	w.produce(60, 90)
	w.waitAll(t, 90)
	r.stop(t)
	for i, b := range w.bots {
		if d, runs := b.count(); runs != d {
			t.Errorf("bot-%d: %d handler runs for %d events", i, runs, d)
		}
	}
	all, err := store.ListCursors(context.Background())
	var cs []impl.Cursor
	for _, c := range all {
		if !engine.IsMarker(c.Key) { // a join's backfill marker (impl/engine/joins.go)
			cs = append(cs, c)
		}
	}
	if err != nil || len(cs) != 1 {
		t.Fatalf("cursors after two runs: %v, %v; want one for s1", cs, err)
	}
	msgs, _ := store.ListMessages(context.Background(), "")
	if len(msgs) != 0 {
		t.Errorf("%d messages left in the queue after every event was delivered", len(msgs))
	}
}

func TestRuntimeDeliversMemory(t *testing.T) {
	testDelivers(t, memstore.New(), engine.HandOffQueued)
}

func TestRuntimeDeliversPostgres(t *testing.T) {
	testDelivers(t, pgtest.NewStore(t), engine.HandOffQueued)
}

func TestRuntimeDeliversPostgresDirect(t *testing.T) {
	testDelivers(t, pgtest.NewStore(t), engine.HandOffDirect)
}

// TestRuntimeBotAddedLater: a bot, membership and key that appear in the
// registry after the start reach the engine through the long poll.
// lateBot registers bot id after the engine started, listed with secret
// listed and without its key, as a member of s1; its webhook server
// accepts requests signed with accepted. It returns the bot and its URL.
func lateBot(t *testing.T, w *world, id string, listed, accepted []byte) (*bot, string) {
	t.Helper()
	b := newBot(t, accepted, 0)
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	w.reg.AddBot(protocol.Bot{ID: id, Secret: base64.StdEncoding.EncodeToString(listed), URL: srv.URL})
	w.reg.AddMembership(protocol.Membership{Stream: "s1", Kind: protocol.KindLog, Bot: id, Member: true})
	return b, srv.URL
}

func TestRuntimeRegistryChanges(t *testing.T) {
	w := newWorld(t, 1, 0)
	r := start(t, w, memstore.New(), fastConfig())
	defer r.stop(t)
	secret := []byte("late")
	b, _ := lateBot(t, w, "late", secret, secret)
	w.produce(0, 10)
	w.waitAll(t, 10)
	if d, _ := b.count(); d != 0 {
		t.Fatalf("the late bot has no key yet but handled %d events", d)
	}
	w.reg.PublishKey("late")
	w.bots = append(w.bots, b)
	w.waitAll(t, 10)
}

// A bot whose secret the registry changes gets every later request signed
// with the new one, without restarting the engine. The bot here accepts
// only the new secret and publishes its key only after the rotation, so
// each request the engine makes must carry the new signature.
func TestRuntimeRegistrySecretRotation(t *testing.T) {
	w := newWorld(t, 1, 0)
	r := start(t, w, memstore.New(), fastConfig())
	defer r.stop(t)
	oldKey, newKey := []byte("before-rotation"), []byte("after-rotation")
	b, url := lateBot(t, w, "rot", oldKey, newKey)
	w.produce(0, 10)
	w.waitAll(t, 10)
	// One registry: any answer that shows the key shows the new secret.
	w.reg.AddBot(protocol.Bot{ID: "rot", Secret: base64.StdEncoding.EncodeToString(newKey), URL: url})
	w.reg.PublishKey("rot")
	w.bots = append(w.bots, b)
	w.waitAll(t, 10)
}

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

// TestBotMove: a moved bot answers on its new URL at once, on its old one
// for the grace, and refuses connections there after it.
func TestBotMove(t *testing.T) {
	b, err := newBot("bot-3", []byte("0123456789abcdef0123"), newRecorder(), 500*time.Millisecond, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	old := b.url()
	nu, err := b.move(300 * time.Millisecond)
	if err != nil || nu == old || nu != b.url() {
		t.Fatalf("move: %q, %v (old %q, now %q)", nu, err, old, b.url())
	}
	// A connection per request: a kept-alive one would outlive a close.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(u string) error {
		resp, err := c.Post(u, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := post(nu); err != nil {
		t.Errorf("new URL: %v", err)
	}
	if err := post(old); err != nil {
		t.Errorf("old URL within the grace: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := post(old); err == nil {
		t.Error("old URL after the grace still answers")
	}
	// The refused request was seen (an engine's attempt at the old URL
	// counts like any other refused connection).
	if qs := recorded(b); len(qs) != 3 || qs[2].outcome != outReset {
		t.Errorf("requests recorded %+v; want the third refused (%q)", qs, outReset)
	}
	b.setMode(modeRefuse)
	b.setMode(modeHealthy)
	if err := post(nu); err != nil {
		t.Errorf("new URL after a refuse window: %v", err)
	}
}

// TestRotationGrace: after a rotation the bot's receiver verifies the old
// secret for rotationGrace, then only the new one.
func TestRotationGrace(t *testing.T) {
	t.Parallel() // it waits out the 5s grace
	old := []byte("0123456789abcdef0123")
	b, err := newBot("bot-1", old, newRecorder(), 500*time.Millisecond, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	h := &harness{rec: newRecorder(), reg: protoserver.NewRegistry()}
	h.rec.mu.Lock()
	h.rotateLocked(b, rand.New(rand.NewPCG(1, 2)))
	h.rec.mu.Unlock()
	n := 0
	verifies := func(secret []byte) bool {
		n++
		id, ts := fmt.Sprintf("ev-%d", n), time.Now().Unix()
		hdr := webhook.Headers{ID: id, Timestamp: strconv.FormatInt(ts, 10), Signature: webhook.Sign(secret, id, ts, []byte("{}"))}
		res := b.rcv.Handle(context.Background(), time.Now(), receiver.Request{Headers: hdr, Body: []byte("{}")}, func(context.Context, receiver.Event) error { return nil })
		return res.Outcome != receiver.Rejected
	}
	if !verifies(old) || !verifies(b.secret) {
		t.Fatal("within the grace both secrets must verify")
	}
	time.Sleep(rotationGrace + 300*time.Millisecond)
	if verifies(old) {
		t.Error("the old secret still verifies after the grace")
	}
	if !verifies(b.secret) {
		t.Error("the new secret does not verify")
	}
}

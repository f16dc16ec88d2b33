package chaos

import (
	"net/http"
	"strings"
	"testing"
	"time"
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
	b.setMode(modeRefuse)
	b.setMode(modeHealthy)
	if err := post(nu); err != nil {
		t.Errorf("new URL after a refuse window: %v", err)
	}
}

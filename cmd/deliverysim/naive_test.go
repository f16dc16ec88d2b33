package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// naiveMain is a deliberately naive engine that speaks runtime/PROTOCOL.md,
// written to show that certification fails an engine that moves its
// cursor before the webhook answers: it persists the position of every
// event as soon as it has read it, fires each webhook once on its own
// goroutine, and never retries. It keeps its cursors in the file named by
// $NAIVE_STATE. Two more planted faults show the harness's own checks
// fire: it signs bot-2's requests with a wrong key (signed-requests), and
// it does not handle SIGTERM, so it dies of it (clean-shutdown).
func naiveMain(args []string) int {
	fs := flag.NewFlagSet("naive", flag.ContinueOnError)
	upstream := fs.String("upstream", "", "")
	registry := fs.String("registry", "", "")
	fs.String("listen", "", "")
	fs.String("dsn", "", "")
	fs.String("schema", "", "")
	fs.String("node", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	n := &naive{upstream: *upstream, registry: *registry, state: os.Getenv("NAIVE_STATE"), cursors: map[string]impl.Position{}}
	n.load()
	for ctx.Err() == nil && !n.fetchRegistry(ctx) {
		time.Sleep(100 * time.Millisecond)
	}
	go func() {
		for ctx.Err() == nil {
			n.fetchRegistry(ctx)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, s := range []string{"log-1", "ts-1"} {
		wg.Add(1)
		go func() { defer wg.Done(); n.tail(ctx, s) }()
	}
	wg.Wait()
	return 0
}

type naive struct {
	upstream, registry, state string

	mu      sync.Mutex
	reg     protocol.Registry
	cursors map[string]impl.Position
}

func (n *naive) load() {
	b, err := os.ReadFile(n.state)
	if err == nil {
		_ = json.Unmarshal(b, &n.cursors)
	}
}

func (n *naive) save() {
	b, _ := json.Marshal(n.cursors)
	tmp := n.state + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, n.state)
	}
}

func (n *naive) fetchRegistry(ctx context.Context) bool {
	var reg protocol.Registry
	if err := naiveGet(ctx, n.registry+protocol.PathRegistry, &reg); err != nil {
		return false
	}
	n.mu.Lock()
	n.reg = reg
	n.mu.Unlock()
	return true
}

func naiveGet(ctx context.Context, u string, v any) error {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(c, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (n *naive) tail(ctx context.Context, stream string) {
	n.mu.Lock()
	cur, known := n.cursors[stream]
	n.mu.Unlock()
	q := url.Values{}
	if stream == "ts-1" {
		q.Set("since", strconv.FormatInt(cur.Major, 10))
	} else {
		q.Set("after", protocol.FormatAfter(cur))
	}
	_ = known
	for ctx.Err() == nil {
		q.Set("wait", "2s")
		var b protocol.Events
		if err := naiveGet(ctx, n.upstream+protocol.PathEvents+stream+"/events?"+q.Encode(), &b); err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, e := range b.Events {
			n.deliver(stream, e)
			// The bug: the cursor moves now, before any webhook answered.
			n.mu.Lock()
			if e.Pos.Pos().Compare(n.cursors[stream]) > 0 {
				n.cursors[stream] = e.Pos.Pos()
			}
			n.save()
			n.mu.Unlock()
		}
		if os.Getenv("NAIVE_NO_PAGING") != "" {
			continue // the smoke check's paging step must catch this: the first answer again and again
		}
		q = url.Values{}
		q.Set("next", strconv.FormatInt(b.Next, 10))
	}
}

func (n *naive) deliver(stream string, e protocol.Event) {
	n.mu.Lock()
	reg := n.reg
	n.mu.Unlock()
	body, _ := base64.StdEncoding.DecodeString(e.Payload)
	for _, bot := range reg.Bots {
		member := false
		for _, m := range reg.Memberships {
			if m.Stream == stream && m.Bot == bot.ID && m.From.Pos().Compare(e.Pos.Pos()) < 0 {
				member = m.Member
			}
		}
		if !member || !bot.HasKey {
			continue
		}
		secret, _ := base64.StdEncoding.DecodeString(bot.Secret)
		if bot.ID == "bot-2" {
			secret = []byte("not the bot's secret")
		}
		ts := time.Now().Unix()
		go func(u string) {
			req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
			req.Header.Set("webhook-id", e.ID)
			req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
			req.Header.Set("webhook-signature", webhook.Sign(secret, e.ID, ts, body))
			c := &http.Client{Timeout: time.Second}
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}(bot.URL)
	}
}

package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// botBook is what the runtime knows of the registry beyond the engine:
// each bot's webhook URL and a request slot semaphore, plus what the
// registry poller has already turned into engine inputs.
type botBook struct {
	per int

	mu   sync.Mutex
	urls map[string]string
	sem  map[string]chan struct{}

	// Owned by the registry poller after load.
	hasKey  map[string]bool
	secrets map[string]string // each bot's secret as last listed
	memb    int               // memberships already handed to the engine
}

func newBotBook(per int) *botBook {
	if per < 1 {
		per = 1
	}
	return &botBook{per: per, urls: map[string]string{}, sem: map[string]chan struct{}{}, hasKey: map[string]bool{}, secrets: map[string]string{}}
}

func (b *botBook) set(id, u string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.urls[id] = u
	if b.sem[id] == nil {
		b.sem[id] = make(chan struct{}, b.per)
	}
}

func (b *botBook) lookup(id string) (string, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.urls[id], b.sem[id]
}

func (b *botBook) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.urls))
	for id := range b.urls {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// held lists, sorted, the bots whose key is not published as far as this
// process has read the registry (none before the first answer). Called on
// the loop, which also applies the registry (load, diff).
func (b *botBook) held() []string {
	out := []string{}
	for id, has := range b.hasKey {
		if !has {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// load turns the first registry answer into the engine's Start registry.
func (b *botBook) load(reg protocol.Registry) (engine.Registry, error) {
	var out engine.Registry
	for _, wb := range reg.Bots {
		eb, err := wb.EngineBot()
		if err != nil {
			return out, err
		}
		b.set(wb.ID, wb.URL)
		b.hasKey[wb.ID] = wb.HasKey
		b.secrets[wb.ID] = wb.Secret
		out.Bots = append(out.Bots, eb)
	}
	sort.Slice(out.Bots, func(i, j int) bool { return out.Bots[i].ID < out.Bots[j].ID })
	for _, wm := range reg.Memberships {
		m, err := wm.EngineMembership()
		if err != nil {
			return out, err
		}
		out.Memberships = append(out.Memberships, m)
	}
	b.memb = len(reg.Memberships)
	return out, nil
}

// diff turns a later registry answer into engine inputs: new bots, bots
// whose secret changed (rotation: the engine signs with the new one from
// then on), keys published since, and memberships appended since.
func (b *botBook) diff(reg protocol.Registry) ([]engine.Input, error) {
	var ins []engine.Input
	bots := append([]protocol.Bot(nil), reg.Bots...)
	sort.Slice(bots, func(i, j int) bool { return bots[i].ID < bots[j].ID })
	for _, wb := range bots {
		had, known := b.hasKey[wb.ID]
		b.set(wb.ID, wb.URL) // a changed URL takes effect for the next request
		switch {
		case !known || wb.Secret != b.secrets[wb.ID]:
			eb, err := wb.EngineBot()
			if err != nil {
				return nil, err
			}
			eb.HasKey = wb.HasKey || had // a published key stays published
			ins = append(ins, engine.BotAdded{Bot: eb})
		case wb.HasKey && !had:
			ins = append(ins, engine.KeyPublished{Bot: wb.ID})
		}
		b.hasKey[wb.ID] = wb.HasKey || had
		b.secrets[wb.ID] = wb.Secret
	}
	if len(reg.Memberships) < b.memb {
		return nil, fmt.Errorf("the registry's membership list shrank from %d to %d entries; it must only grow", b.memb, len(reg.Memberships))
	}
	for _, wm := range reg.Memberships[b.memb:] {
		m, err := wm.EngineMembership()
		if err != nil {
			return nil, err
		}
		ins = append(ins, engine.MembershipChanged{Membership: m})
	}
	b.memb = len(reg.Memberships)
	return ins, nil
}

// getJSON GETs u into v; any non-200 answer is an error naming it.
func getJSON(ctx context.Context, c *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(v)
}

func (l *loop) registryURL(after int64, wait time.Duration) string {
	q := url.Values{}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
		q.Set("wait", wait.String())
	}
	u := l.o.Registry + protocol.PathRegistry
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// fetchRegistryUntil gets the registry, retrying with backoff until it
// answers or ctx ends (the engine cannot start without it).
func (l *loop) fetchRegistryUntil(ctx context.Context) (protocol.Registry, error) {
	bo := newBackoff()
	for {
		var reg protocol.Registry
		err := getJSON(ctx, l.client, l.registryURL(-1, 0), &reg)
		if err == nil {
			return reg, nil
		}
		if ctx.Err() != nil {
			return reg, fmt.Errorf("runtime: stopped before the registry at %s answered: %w", l.o.Registry, err)
		}
		l.log.Warn("registry unavailable; retrying", "url", l.o.Registry, "err", err)
		if !bo.sleep(ctx) {
			return reg, fmt.Errorf("runtime: stopped before the registry at %s answered: %w", l.o.Registry, err)
		}
	}
}

// pollRegistry long-polls the registry for changes after version and hands
// each newer registry to the loop.
func (l *loop) pollRegistry(ctx context.Context, version int64) {
	bo := newBackoff()
	for ctx.Err() == nil {
		var reg protocol.Registry
		if err := getJSON(ctx, l.client, l.registryURL(version, l.o.PollWait), &reg); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("registry poll failed", "err", err)
				bo.sleep(ctx)
			}
			continue
		}
		bo.reset()
		if reg.Version <= version {
			continue
		}
		version = reg.Version
		select {
		case l.regs <- reg:
		case <-ctx.Done():
			return
		}
	}
}

// applyRegistry turns a newer registry into engine inputs (on the loop).
func (l *loop) applyRegistry(reg protocol.Registry) {
	if reg.Version <= l.regVersion {
		return
	}
	ins, err := l.bots.diff(reg)
	if err != nil {
		l.log.Error("registry answer refused", "version", reg.Version, "err", err)
		return
	}
	l.regVersion = reg.Version
	for _, in := range ins {
		l.step(in)
	}
}

// catchUpRegistry makes sure the registry is applied up to version before
// a batch produced under it is processed; it blocks the loop (rarely: the
// long poll is normally ahead) until the registry answers or draining
// starts.
func (l *loop) catchUpRegistry(version int64) bool {
	bo := newBackoff()
	for l.regVersion < version {
		var reg protocol.Registry
		ctx, cancel := context.WithTimeout(l.pollCtx, 5*time.Second)
		err := getJSON(ctx, l.client, l.registryURL(-1, 0), &reg)
		cancel()
		if err == nil {
			l.applyRegistry(reg)
			continue
		}
		if l.pollCtx.Err() != nil {
			return false
		}
		l.log.Warn("registry behind the upstream and unavailable; retrying", "need", version, "have", l.regVersion, "err", err)
		bo.sleep(l.pollCtx)
	}
	return true
}

// backoff is the wait between failed polls: 100ms doubling to 2s.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 100 * time.Millisecond} }

func (b *backoff) reset() { b.d = 100 * time.Millisecond }

// sleep waits the current delay (false if ctx ended first) and doubles it.
func (b *backoff) sleep(ctx context.Context) bool {
	t := time.NewTimer(b.d)
	defer t.Stop()
	if b.d *= 2; b.d > 2*time.Second {
		b.d = 2 * time.Second
	}
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Snapshot sources under chaos (seed 002, PROTOCOL.md "Snapshot sources"):
// repositories whose state changes while the run goes on, apps watching
// them (several per repository), and apps failing in the middle of a
// delivery. Only for an engine that declares the capability
// (Config.Snapshots); the judge's questions are snapshot_rules.go's.

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

// The snapshot workload: app-0 is the healthy witness (snapshot-progress
// is judged on it), app-1 answers 503 for two windows, app-2 has its
// handler run and its answer arrive after the engine's timeout (a
// delivery that failed in the middle: processed, not acknowledged).
var snapRepoApps = []struct {
	repo string
	apps []string
}{
	{"repo-1", []string{"app-0", "app-1", "app-2"}},
	{"repo-2", []string{"app-0", "app-2"}},
}

const (
	snapHealthy = "app-0"
	// snapChangeEvery: one repository changes this often during the
	// fault phase.
	snapChangeEvery = 500 * time.Millisecond
)

// Snapshot app fault modes.
const (
	snapModeHealthy = iota
	snapMode5xx
	snapModeTimeout
)

// snapFaults are the apps' fault windows, as fractions of the fault phase.
var snapFaults = []struct {
	app      string
	mode     int32
	from, to float64
}{
	{"app-1", snapMode5xx, 0.20, 0.40},
	{"app-2", snapModeTimeout, 0.45, 0.60},
	{"app-1", snapMode5xx, 0.65, 0.80},
}

// snapPub is one published state of a repository.
type snapPub struct {
	at      time.Time
	version int64
	items   map[string]string
}

// snapRun is one change an app's handler ran (the receiver deduplicates
// by webhook-id), in arrival order.
type snapRun struct {
	app string
	at  time.Time
	c   protocol.RepoChange
	bad string // why the body is not a change, if it is not
}

// snapRecord is what the harness saw of the snapshot sources; guarded by
// recorder.mu.
type snapRecord struct {
	on     bool
	watch  map[string][]string // repo -> apps
	pubs   map[string][]snapPub
	runs   []snapRun
	oks    int // 2xx answers the apps wrote within the engine's timeout
	sends  int
	faults []botFault
	// settleApart: what snapConverged still found apart when the settle
	// ended; settleEnd: when it ended.
	settleApart []string
	settleEnd   time.Time
}

type snapApp struct {
	id      string
	secret  []byte
	rcv     *receiver.Receiver
	rec     *recorder
	timeout time.Duration
	mode    atomic.Int32
	srv     *http.Server
	addr    string
}

// snapWorld is the harness's side: the repositories it serves and the apps.
type snapWorld struct {
	repos *protoserver.Repos
	apps  map[string]*snapApp
	state map[string]map[string]string // repo -> id -> version (the producer's)
	next  int
	rng   *rand.Rand
}

func newSnapWorld(seed uint64, rec *recorder, timeout time.Duration) (*snapWorld, error) {
	w := &snapWorld{repos: protoserver.NewRepos(), apps: map[string]*snapApp{}, state: map[string]map[string]string{},
		rng: rand.New(rand.NewPCG(seed, 0x5a95))}
	rec.mu.Lock()
	rec.snap.on = true
	rec.snap.watch = map[string][]string{}
	rec.snap.pubs = map[string][]snapPub{}
	rec.mu.Unlock()
	for _, ra := range snapRepoApps {
		for _, id := range ra.apps {
			if w.apps[id] != nil {
				continue
			}
			secret := make([]byte, 24)
			for i := range secret {
				secret[i] = byte(w.rng.Uint32())
			}
			a, err := newSnapApp(id, secret, rec, timeout)
			if err != nil {
				w.close()
				return nil, err
			}
			w.apps[id] = a
		}
		rec.mu.Lock()
		rec.snap.watch[ra.repo] = ra.apps
		rec.mu.Unlock()
		w.state[ra.repo] = map[string]string{}
		for range 4 {
			w.create(ra.repo)
		}
		w.publish(rec, ra.repo)
	}
	return w, nil
}

func (w *snapWorld) close() {
	for _, a := range w.apps {
		_ = a.srv.Close()
	}
}

// register adds the apps to the registry as bots with their keys and no
// memberships (their URL and secret are what the engine needs).
func (w *snapWorld) register(reg *protoserver.Registry) {
	for _, ra := range snapRepoApps {
		for _, id := range ra.apps {
			a := w.apps[id]
			if a.srv == nil {
				continue
			}
			reg.AddBot(protocol.Bot{ID: a.id, Secret: b64(a.secret), URL: "http://" + a.addr + "/", HasKey: true})
		}
	}
}

func (w *snapWorld) create(repo string) {
	w.next++
	w.state[repo][fmt.Sprintf("f-%03d", w.next)] = fmt.Sprintf("sha-%d", w.rng.Uint32()%100000)
}

// mutate changes one repository: an update, a create or a delete.
func (w *snapWorld) mutate(rec *recorder) {
	ra := snapRepoApps[w.rng.IntN(len(snapRepoApps))]
	st := w.state[ra.repo]
	ids := snapIDs(st)
	switch k := w.rng.IntN(3); {
	case len(ids) < 3 || k == 0:
		w.create(ra.repo)
	case k == 1:
		st[ids[w.rng.IntN(len(ids))]] = fmt.Sprintf("sha-%d", w.rng.Uint32()%100000)
	default:
		delete(st, ids[w.rng.IntN(len(ids))])
	}
	w.publish(rec, ra.repo)
}

// publish serves the repository's state and records it, under one lock
// so no change of it is handled before its publication is recorded.
func (w *snapWorld) publish(rec *recorder, repo string) {
	st := w.state[repo]
	items := make([]protocol.RepoItem, 0, len(st))
	cp := map[string]string{}
	for _, id := range snapIDs(st) {
		items = append(items, protocol.RepoItem{ID: id, Version: st[id]})
		cp[id] = st[id]
	}
	var apps []string
	for _, ra := range snapRepoApps {
		if ra.repo == repo {
			apps = ra.apps
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	v := w.repos.Set(repo, apps, items)
	rec.snap.pubs[repo] = append(rec.snap.pubs[repo], snapPub{at: time.Now(), version: v, items: cp})
}

// run changes the repositories and switches the apps' faults until ctx
// ends (the heal), then heals the apps.
func (w *snapWorld) run(ctx context.Context, rec *recorder, phase time.Duration) {
	start := time.Now()
	tick := time.NewTicker(snapChangeEvery)
	defer tick.Stop()
	defer func() {
		for _, a := range w.apps {
			a.mode.Store(snapModeHealthy)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mutate(rec)
		el := float64(time.Since(start)) / float64(phase)
		for _, a := range w.apps {
			m := int32(snapModeHealthy)
			for _, f := range snapFaults {
				if f.app == a.id && el >= f.from && el < f.to {
					m = f.mode
				}
			}
			if old := a.mode.Swap(m); old != m {
				rec.mu.Lock()
				if m != snapModeHealthy {
					rec.snap.faults = append(rec.snap.faults, botFault{bot: a.id, mode: m, w: window{from: time.Now()}})
				} else if n := len(rec.snap.faults); n > 0 {
					rec.snap.faults[n-1].w.to = time.Now()
				}
				rec.mu.Unlock()
			}
		}
	}
}

func newSnapApp(id string, secret []byte, rec *recorder, timeout time.Duration) (*snapApp, error) {
	rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{secret}, Window: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	ln, err := stableListener()
	if err != nil {
		return nil, err
	}
	a := &snapApp{id: id, secret: secret, rcv: rcv, rec: rec, timeout: timeout, addr: ln.Addr().String()}
	a.srv = &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *snapApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	mode := a.mode.Load()
	a.rec.mu.Lock()
	a.rec.snap.sends++
	a.rec.mu.Unlock()
	if mode == snapMode5xx {
		http.Error(w, "injected failure", http.StatusServiceUnavailable)
		return
	}
	res := a.rcv.Handle(r.Context(), time.Now(), receiver.Request{Headers: webhook.HeadersOf(r.Header), Body: body},
		func(_ context.Context, ev receiver.Event) error {
			run := snapRun{app: a.id, at: time.Now()}
			if err := json.Unmarshal(ev.Body, &run.c); err != nil {
				run.bad = "the body is not a change: " + err.Error()
			}
			a.rec.mu.Lock()
			a.rec.snap.runs = append(a.rec.snap.runs, run)
			a.rec.mu.Unlock()
			return nil
		})
	if mode == snapModeTimeout {
		// Processed; the answer comes after the engine stopped waiting.
		wait(r, 2*a.timeout+100*time.Millisecond)
		if r.Context().Err() == nil {
			w.WriteHeader(res.Status)
		}
		return
	}
	w.WriteHeader(res.Status)
	if res.Status >= 200 && res.Status < 300 && http.NewResponseController(w).Flush() == nil {
		a.rec.mu.Lock()
		a.rec.snap.oks++
		a.rec.mu.Unlock()
	}
}

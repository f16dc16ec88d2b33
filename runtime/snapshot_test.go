package runtime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/memstore"
	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

// snapApp applies the changes its handler runs ("current state wins")
// and records each op; its first failFirst requests answer 500.
type snapApp struct {
	rcv       *receiver.Receiver
	mu        sync.Mutex
	have      map[string]string
	ops       []string
	requests  int
	failFirst int
}

func (a *snapApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests++
	fail := a.requests <= a.failFirst
	a.mu.Unlock()
	if fail {
		http.Error(w, "injected", http.StatusInternalServerError)
		return
	}
	a.rcv.Handler(func(_ context.Context, ev receiver.Event) error {
		var c protocol.RepoChange
		if err := json.Unmarshal(ev.Body, &c); err != nil {
			return err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ops = append(a.ops, c.Op+" "+c.ID)
		if c.Op == "DELETE" {
			delete(a.have, c.ID)
		} else {
			a.have[c.ID] = c.Version
		}
		return nil
	}).ServeHTTP(w, r)
}

func (a *snapApp) state() (map[string]string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.have), append([]string(nil), a.ops...)
}

// TestSnapshotSources: the runtime feeds the upstream's repositories to
// the engine core's snapshot worker. Two apps watch one repository; app-1
// fails its first requests. Each converges on the repository's state, and
// after a change (an update, a delete, a create) on the new one, each
// sent the changes from its own delivered state.
func TestSnapshotSources(t *testing.T) {
	w := &world{up: protoserver.NewUpstream(), reg: protoserver.NewRegistry()}
	repos := protoserver.NewRepos()
	mux := http.NewServeMux()
	mux.Handle(protocol.PathRepos, repos)
	mux.Handle(protocol.PathRepos+"/", repos)
	mux.Handle("/", w.up)
	us, rs := httptest.NewServer(mux), httptest.NewServer(w.reg)
	t.Cleanup(us.Close)
	t.Cleanup(rs.Close)
	w.urls = [2]string{us.URL, rs.URL}
	var apps []*snapApp
	for i := range 2 {
		secret := []byte(fmt.Sprintf("app-secret-%d", i))
		rcv, err := receiver.New(receiver.Config{Secrets: [][]byte{secret}})
		if err != nil {
			t.Fatal(err)
		}
		a := &snapApp{rcv: rcv, have: map[string]string{}, failFirst: 3 * i}
		srv := httptest.NewServer(a)
		t.Cleanup(srv.Close)
		w.reg.AddBot(protocol.Bot{ID: fmt.Sprintf("app-%d", i), Secret: base64.StdEncoding.EncodeToString(secret), URL: srv.URL, HasKey: true})
		apps = append(apps, a)
	}
	watchers := []string{"app-0", "app-1"}
	v1 := map[string]string{"a": "1", "b": "1", "c": "1"}
	repos.Set("repo-1", watchers, items(v1))

	r := start(t, w, memstore.New(), fastConfig())
	defer r.stop(t)
	waitHold(t, apps, v1)
	for i, a := range apps {
		if _, ops := a.state(); strings.Join(ops, ",") != "CREATE a,CREATE b,CREATE c" {
			t.Errorf("app-%d was sent %v; want the three CREATEs", i, ops)
		}
	}
	v2 := map[string]string{"a": "2", "c": "1", "d": "1"}
	repos.Set("repo-1", watchers, items(v2))
	waitHold(t, apps, v2)
	for i, a := range apps {
		if _, ops := a.state(); strings.Join(ops[3:], ",") != "UPDATE a,DELETE b,CREATE d" {
			t.Errorf("app-%d was sent %v after the change; want UPDATE a, DELETE b, CREATE d", i, ops[3:])
		}
	}
}

func items(m map[string]string) []protocol.RepoItem {
	var out []protocol.RepoItem
	for id, v := range m {
		out = append(out, protocol.RepoItem{ID: id, Version: v})
	}
	return out
}

// waitHold waits (bounded) until every app holds want.
func waitHold(t *testing.T, apps []*snapApp, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := true
		for _, a := range apps {
			if have, _ := a.state(); !maps.Equal(have, want) {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			for i, a := range apps {
				have, ops := a.state()
				t.Errorf("app-%d holds %v after %v; want %v", i, have, ops, want)
			}
			t.FailNow()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

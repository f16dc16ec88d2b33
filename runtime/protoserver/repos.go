package protoserver

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// Repos serves snapshot sources (PROTOCOL.md, "Snapshot sources"):
// GET /v1/repos lists them, GET /v1/repos/{repo}?after=V&wait=D answers a
// repository's whole current state once its version exceeds V (or the
// wait runs out: then the same state again).
type Repos struct {
	mu      sync.Mutex
	repos   map[string]*protocol.RepoState
	changed notifier
}

// NewRepos returns a server with no repositories.
func NewRepos() *Repos { return &Repos{repos: map[string]*protocol.RepoState{}} }

// Set replaces a repository's state (declaring it if new) and returns
// its new version.
func (s *Repos) Set(repo string, apps []string, items []protocol.RepoItem) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.repos[repo]
	if st == nil {
		st = &protocol.RepoState{Repo: repo}
		s.repos[repo] = st
	}
	st.Version++
	st.Apps = slices.Clone(apps)
	st.Items = slices.Clone(items)
	slices.SortFunc(st.Items, func(a, b protocol.RepoItem) int { return strings.Compare(a.ID, b.ID) })
	s.changed.fire()
	return st.Version
}

func (s *Repos) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == protocol.PathRepos {
		s.mu.Lock()
		l := protocol.RepoList{Repos: []string{}}
		for n := range s.repos {
			l.Repos = append(l.Repos, n)
		}
		s.mu.Unlock()
		slices.Sort(l.Repos)
		writeJSON(w, l)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, protocol.PathRepos+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		http.Error(w, "not found: GET /v1/repos or /v1/repos/{repo}", http.StatusNotFound)
		return
	}
	wait, err := parseWait(r, 0) // MaxWait
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	after := int64(-1)
	if a := r.URL.Query().Get("after"); a != "" {
		if after, err = strconv.ParseInt(a, 10, 64); err != nil {
			http.Error(w, "after: want a version this upstream gave", http.StatusBadRequest)
			return
		}
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		st := s.repos[name]
		if st == nil {
			s.mu.Unlock()
			http.Error(w, "no repository "+strconv.Quote(name), http.StatusNotFound)
			return
		}
		if st.Version > after || wait == 0 {
			out := protocol.RepoState{Repo: st.Repo, Version: st.Version, Apps: slices.Clone(st.Apps), Items: slices.Clone(st.Items)}
			s.mu.Unlock()
			if out.Items == nil {
				out.Items = []protocol.RepoItem{}
			}
			writeJSON(w, out)
			return
		}
		ch := s.changed.wait()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			wait = 0
		case <-r.Context().Done():
			return
		}
	}
}

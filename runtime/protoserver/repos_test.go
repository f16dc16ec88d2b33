package protoserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deliverysim/deliverysim/runtime/protocol"
)

func getRepo(t *testing.T, h http.Handler, url string, v any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return rec.Code
}

// TestRepos: the list, a repository's whole state with its version, a
// long poll that a change ends, and the errors.
func TestRepos(t *testing.T) {
	s := NewRepos()
	s.Set("repo-1", []string{"app-0"}, []protocol.RepoItem{{ID: "b", Version: "1"}, {ID: "a", Version: "2"}})
	var l protocol.RepoList
	if c := getRepo(t, s, "/v1/repos", &l); c != 200 || len(l.Repos) != 1 || l.Repos[0] != "repo-1" {
		t.Fatalf("list: %d %v", c, l)
	}
	var st protocol.RepoState
	if c := getRepo(t, s, "/v1/repos/repo-1", &st); c != 200 || st.Version != 1 || len(st.Items) != 2 || st.Items[0].ID != "a" || st.Apps[0] != "app-0" {
		t.Fatalf("state: %d %+v; want version 1, items sorted by id", c, st)
	}
	// The wait runs out: the same state again (the engine's periodic scan).
	if c := getRepo(t, s, "/v1/repos/repo-1?after=1&wait=0s", &st); c != 200 || st.Version != 1 {
		t.Fatalf("after=1 with no wait: %d %+v; want version 1 at once", c, st)
	}
	done := make(chan protocol.RepoState)
	go func() {
		var got protocol.RepoState
		getRepo(t, s, "/v1/repos/repo-1?after=1&wait=30s", &got)
		done <- got
	}()
	s.Set("repo-1", []string{"app-0"}, nil)
	if got := <-done; got.Version < 2 || len(got.Items) != 0 || got.Items == nil {
		t.Fatalf("long poll across a change: %+v; want version 2 with items [] (not null)", got)
	}
	for _, u := range []string{"/v1/repos/nope", "/v1/repos/repo-1/x"} {
		if c := getRepo(t, s, u, &st); c != 404 {
			t.Errorf("GET %s: %d; want 404", u, c)
		}
	}
	if c := getRepo(t, s, "/v1/repos/repo-1?after=x", &st); c != 400 {
		t.Errorf("after=x: %d; want 400", c)
	}
}

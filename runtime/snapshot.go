package runtime

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// Snapshot sources (PROTOCOL.md, "Snapshot sources"): the runtime is the
// engine core's snapshot worker. It lists the upstream's repositories once
// and long-polls each; every answer (a new version, or the wait running
// out with the same one: the periodic scan that revives a change the
// engine gave up on) is handed to the engine as a SourceState, the input
// the simulator feeds it (sim/snapshot.go). The engine diffs each app's
// own delivered state against it and sends CREATE/UPDATE/DELETE changes
// (impl/engine/snapshot.go), which go out as any other Send.

// snapshotFeedDelay is how long the slow-feed plant holds each state.
const snapshotFeedDelay = 30 * time.Second

// pollRepos lists the repositories and starts a poller for each. An
// upstream that answers 404 has no snapshot sources.
func (l *loop) pollRepos(ctx context.Context) {
	bo := newBackoff()
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.o.Upstream+protocol.PathRepos, nil)
		if err != nil {
			return
		}
		resp, err := l.client.Do(req)
		if err != nil {
			bo.sleep(ctx)
			continue
		}
		var list protocol.RepoList
		status := resp.StatusCode
		if status == http.StatusOK {
			err = json.NewDecoder(resp.Body).Decode(&list)
		}
		resp.Body.Close()
		switch {
		case status == http.StatusNotFound:
			l.log.Info("the upstream serves no snapshot sources")
			return
		case status != http.StatusOK || err != nil:
			l.log.Warn("listing snapshot sources failed", "status", status, "err", err)
			bo.sleep(ctx)
			continue
		}
		l.log.Info("snapshot sources", "repos", list.Repos)
		for _, name := range list.Repos {
			go l.pollRepo(ctx, name)
		}
		return
	}
}

// pollRepo long-polls one repository and hands every state it is served
// to the engine.
func (l *loop) pollRepo(ctx context.Context, name string) {
	bo := newBackoff()
	after := int64(-1)
	for ctx.Err() == nil {
		q := url.Values{}
		if after >= 0 {
			q.Set("after", strconv.FormatInt(after, 10))
			q.Set("wait", l.o.PollWait.String())
		}
		u := l.o.Upstream + protocol.PathRepos + "/" + url.PathEscape(name)
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		var st protocol.RepoState
		if err := getJSON(ctx, l.client, u, &st); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("snapshot source poll failed", "repo", name, "err", err)
				bo.sleep(ctx)
			}
			continue
		}
		bo.reset()
		after = st.Version
		in := engine.SourceState{Source: name, Apps: st.Apps, Items: make([]impl.DeliveredItem, len(st.Items))}
		for i, it := range st.Items {
			in.Items[i] = impl.DeliveredItem{ID: it.ID, Version: it.Version}
		}
		if l.o.Plant.SnapshotSlowFeed {
			go func() {
				t := time.NewTimer(snapshotFeedDelay)
				defer t.Stop()
				select {
				case <-t.C:
					l.handSource(ctx, in)
				case <-ctx.Done():
				}
			}()
			continue
		}
		l.handSource(ctx, in)
	}
}

func (l *loop) handSource(ctx context.Context, in engine.SourceState) {
	select {
	case l.in <- in:
	case <-ctx.Done():
	}
}

// skipSnapshotDelete: the skip-deletes plant answers a DELETE change
// itself, as a 2xx, without sending it.
func (l *loop) skipSnapshotDelete(s engine.Send) bool {
	if !l.o.Plant.SnapshotSkipDeletes || !s.Snapshot {
		return false
	}
	var c protocol.RepoChange
	return json.Unmarshal(s.Body, &c) == nil && c.Op == string(engine.OpDelete)
}

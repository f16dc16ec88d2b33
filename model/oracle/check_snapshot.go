package oracle

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Seed 002's guarantees for snapshot sources ("current state wins"):
//
//   - snapshot-convergence: when the run ends, every app that watches a
//     source holds exactly the source's current items and versions;
//   - snapshot-isolation: what an app is sent is computed from what that app
//     has. An UPDATE of an item the app never received means the diff was
//     taken against some other baseline (another app's progress, a shared
//     snapshot), which is how a failing app ends up missing files or
//     receiving operations that make no sense to it. (A DELETE of an item
//     the app never got is allowed: seed 002 lists it as an edge case of a
//     delete during a retry, and an engine that cannot tell whether a timed
//     out CREATE was processed must send it.)
//
// Apps are modelled as applying changes in the order the engine made the
// sends (Observation.Request): a late copy of an older send does not undo a
// newer one. Changes must also carry versions the source really had
// (no-phantom-delivery).

type snapItem struct {
	version string
	present bool
	ever    bool  // the app received this item at some point
	req     int64 // the send that last set it
}

type snapSrc struct {
	apps     []string
	items    map[string]string
	versions map[string]map[string]bool // item -> every version it had
}

type snapChecker struct {
	sources map[string]*snapSrc
	apps    map[chkKey]map[string]*snapItem // (app, source) -> item -> state
}

func newSnapChecker() *snapChecker {
	return &snapChecker{sources: map[string]*snapSrc{}, apps: map[chkKey]map[string]*snapItem{}}
}

func (c *checker) snapSource(o *Observation) {
	src := c.snap.sources[o.Stream]
	if src == nil {
		src = &snapSrc{items: map[string]string{}, versions: map[string]map[string]bool{}}
		c.snap.sources[o.Stream] = src
	}
	src.apps = slices.Clone(o.Apps)
	sort.Strings(src.apps)
	src.items = map[string]string{}
	for _, it := range o.Items {
		src.items[it.ID] = it.Version
		if src.versions[it.ID] == nil {
			src.versions[it.ID] = map[string]bool{}
		}
		src.versions[it.ID][it.Version] = true
	}
}

func (c *checker) snapWatches(source, app string) bool {
	src := c.snap.sources[source]
	return src != nil && slices.Contains(src.apps, app)
}

// snapSend checks one change notification as the engine sent it.
func (c *checker) snapSend(o *Observation) {
	c.stats.Sends++
	once := chkOnce(o.Bot, o.EventID)
	src := c.snap.sources[o.Stream]
	switch {
	case src == nil:
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, once,
			"node %s sent a change of %q, which is not a snapshot source", o.Node, o.Stream)
	case !c.snapWatches(o.Stream, o.Bot):
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, once,
			"node %s sent a change of %s to an app that does not watch it", o.Node, o.Stream)
	case o.Op != "CREATE" && o.Op != "UPDATE" && o.Op != "DELETE":
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, once,
			"node %s sent a body that is not a change notification (op %q)", o.Node, o.Op)
	case o.Op != "DELETE" && !src.versions[o.Item][o.Version]:
		c.report(InvNoPhantomDelivery, o.Bot, o.EventID, once,
			"node %s sent %s %s@%s, a version the source never had", o.Node, o.Op, o.Item, o.Version)
	}
	// A change's webhook-id is fixed for one decision to send it and reused
	// by every retry of that decision (check_wire.go).
	if n := c.snapFails[c.key(o.Bot, o.EventID)]; n >= c.p.MaxAttempts {
		c.report(InvBoundedRetry, o.Bot, o.EventID, once+"\x00attempt",
			"node %s sent this snapshot change again after the bot answered %d of its sends with a failure (MaxAttempts=%d)", o.Node, n, c.p.MaxAttempts)
	}
}

// snapHandled applies a change the app's handler ran to the app's model.
func (c *checker) snapHandled(o *Observation) {
	c.stats.HandlerRuns++
	c.stats.SnapshotChanges++
	c.duplicateRun(o, c.key(o.Bot, o.EventID))
	key := c.key(o.Bot, o.Stream)
	items := c.snap.apps[key]
	if items == nil {
		items = map[string]*snapItem{}
		c.snap.apps[key] = items
	}
	it := items[o.Item]
	if it == nil {
		it = &snapItem{}
		items[o.Item] = it
	}
	if o.Op == "UPDATE" && !it.ever {
		c.report(InvSnapshotIsolation, o.Bot, o.EventID, chkOnce(o.Bot, o.Stream+"\x00"+o.Item),
			"app received %s of %s in %s, an item it never received: the change was computed against a baseline that is not this app's",
			o.Op, o.Item, o.Stream)
	}
	if o.Request <= it.req {
		return // an older send arriving late; the app already has newer
	}
	it.req = o.Request
	switch o.Op {
	case "CREATE", "UPDATE":
		it.version, it.present, it.ever = o.Version, true, true
	case "DELETE":
		it.version, it.present = "", false
	}
}

// snapFinish: every app holds its sources' current state.
func (c *checker) snapFinish() {
	for _, name := range chkSortedStrings(c.snap.sources) {
		src := c.snap.sources[name]
		for _, app := range src.apps {
			have := map[string]string{}
			for id, it := range c.snap.apps[c.key(app, name)] {
				if it.present {
					have[id] = it.version
				}
			}
			if diff := snapDiff(have, src.items); diff != "" {
				c.report(InvSnapshotConvergence, app, "", chkOnce(app, name),
					"app did not converge on source %s by the end of the run: %s", name, diff)
			}
		}
	}
}

// snapDiff describes how have differs from want ("" if equal), listing at
// most a few items.
func snapDiff(have, want map[string]string) string {
	ids := map[string]bool{}
	for id := range have {
		ids[id] = true
	}
	for id := range want {
		ids[id] = true
	}
	var parts []string
	for _, id := range chkSortedStrings(ids) {
		h, hok := have[id]
		w, wok := want[id]
		switch {
		case hok && !wok:
			parts = append(parts, fmt.Sprintf("has %s@%s, which the source no longer has", id, h))
		case !hok && wok:
			parts = append(parts, fmt.Sprintf("lacks %s@%s", id, w))
		case h != w:
			parts = append(parts, fmt.Sprintf("has %s@%s, the source %s@%s", id, h, id, w))
		}
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, "; ")
}

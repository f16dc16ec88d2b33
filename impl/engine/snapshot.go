package engine

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// Seed 002: snapshot-style delivery. Each (app, source) pair converges on
// the source's current state independently, one change at a time, and the
// app's delivered state is recorded only after its 2xx. What an app is sent
// is computed from what that app has, so one app's failures never change
// what another receives.

type snapKey struct{ app, source string }

// Op is a seed-002 change kind.
type Op string

const (
	OpCreate Op = "CREATE"
	OpUpdate Op = "UPDATE"
	OpDelete Op = "DELETE"
)

// Change is one seed-002 change notification, as carried in a snapshot
// Send's Body (JSON).
type Change struct {
	Source  string `json:"source"`
	Op      Op     `json:"op"`
	ID      string `json:"id"`
	Version string `json:"version,omitempty"`
}

// Diff returns the changes that take an app from delivered to current, by
// seed 002's table: unknown to the app -> CREATE, different version ->
// UPDATE, gone from the source -> DELETE, same version -> nothing. Both
// inputs must be sorted by ID; the result is too.
func Diff(delivered, current []impl.DeliveredItem) []Change {
	var out []Change
	i, j := 0, 0
	for i < len(delivered) || j < len(current) {
		switch {
		case j == len(current) || (i < len(delivered) && delivered[i].ID < current[j].ID):
			out = append(out, Change{Op: OpDelete, ID: delivered[i].ID})
			i++
		case i == len(delivered) || current[j].ID < delivered[i].ID:
			out = append(out, Change{Op: OpCreate, ID: current[j].ID, Version: current[j].Version})
			j++
		default:
			if delivered[i].Version != current[j].Version {
				out = append(out, Change{Op: OpUpdate, ID: current[j].ID, Version: current[j].Version})
			}
			i++
			j++
		}
	}
	return out
}

// attemptedSource names where the engine records, before sending a change
// of an item whose state at the app it is sure of, what the app may hold
// after it: the version a CREATE or UPDATE gives it, or deletedIntent for a
// DELETE. If the app processed the request but its answer was lost (a
// timeout, an engine crash), the delivered record is not the app's state:
//   - a CREATE: the item must still be deleted when the source deletes it,
//     or the app keeps it forever (found by the simulator's
//     snapshot-convergence check). An app may therefore receive a DELETE
//     for an item it never got, which seed 002 lists among its expected
//     edge cases;
//   - an UPDATE or a DELETE: a source that reverts to the delivered state
//     (a rollback: versions repeat) diffs to nothing against the record,
//     yet the app may hold the newer version or lack the item (the
//     workload's rollback corner, sim/workload.go drawRollback; seed 1717;
//     scenarios/testdata/regress/reverted-source-resends-what-an-unconfirmed-delete-removed.yaml).
//
// An item whose entry differs from its delivered state is unsure: the app
// may hold that, the delivered state, or what any later unconfirmed send
// gave it, so the engine sends it the current state even where Diff sends
// nothing, and keeps the entry (a second unconfirmed send must not make
// the item look sure) until a 2xx of a change of the item: a successful
// DELETE removes the entry, as does any success sent while unsure; one sent
// while sure leaves the entry equal to the new delivered version.
func attemptedSource(source string) string { return "attempted:" + source }

// deletedIntent is the state of an item a DELETE was sent for (and of one
// a record lacks): a control character no source version carries
// (versions are the source's printable strings).
const deletedIntent = "\x01deleted"

func intentOf(c Change) string {
	if c.Op == OpDelete {
		return deletedIntent
	}
	return c.Version
}

// stateOf is id's version in items, deletedIntent if it has none.
func stateOf(items []impl.DeliveredItem, id string) string {
	i, found := slices.BinarySearchFunc(items, id, func(it impl.DeliveredItem, id string) int { return strings.Compare(it.ID, id) })
	if !found {
		return deletedIntent
	}
	return items[i].Version
}

// unsure says whether the attempted entries leave id's state at the app
// unknown (see attemptedSource).
func unsure(delivered, attempted []impl.DeliveredItem, id string) bool {
	a := stateOf(attempted, id)
	return hasItem(attempted, id) && a != stateOf(delivered, id)
}

// unconfirmed adds to changes (Diff's, from the delivered record) the
// current state of every unsure item Diff sends nothing for (every change
// sets the item absolutely, so a change Diff sends covers whatever the
// app holds).
func unconfirmed(changes []Change, delivered, current, attempted []impl.DeliveredItem) []Change {
	n := len(changes)
	for _, a := range attempted {
		if !unsure(delivered, attempted, a.ID) || slices.ContainsFunc(changes[:n], func(c Change) bool { return c.ID == a.ID }) {
			continue
		}
		switch cur := stateOf(current, a.ID); {
		case cur == deletedIntent:
			changes = append(changes, Change{Op: OpDelete, ID: a.ID})
		case hasItem(delivered, a.ID):
			changes = append(changes, Change{Op: OpUpdate, ID: a.ID, Version: cur})
		default:
			changes = append(changes, Change{Op: OpCreate, ID: a.ID, Version: cur})
		}
	}
	return changes
}

// SnapshotEventID is the webhook-id of one change instance: instance names
// the engine's decision to send it (see snapState.curID), so the id is stable
// across retries of that decision and different for every other change,
// including a later change identical in op, item and version. A receiver
// deduplicates by webhook-id; were the id only (op, item, version), the
// second DELETE of an item that another node's stale retry re-created would
// be dropped as a duplicate and the app would keep the item forever (seed
// 4844, two nodes; scenarios/testdata/regress/seed-4844-min.yaml).
func SnapshotEventID(source string, c Change, instance string) string {
	var b strings.Builder
	b.WriteString("snapshot:")
	b.WriteString(source)
	b.WriteByte(':')
	b.WriteString(string(c.Op))
	b.WriteByte(':')
	b.WriteString(c.ID)
	if c.Op != OpDelete {
		b.WriteByte('@')
		b.WriteString(c.Version)
	}
	b.WriteByte('#')
	b.WriteString(instance)
	return b.String()
}

type snapState struct {
	key    snapKey
	reqID  uint64 // outstanding request, 0 if none
	cur    Change
	hasCur bool
	curID  string // cur's webhook-id, fixed at its first send

	attempts int  // failed attempts of cur
	dead     bool // cur exhausted its attempts; waits for the next SourceState
	timerID  uint64
}

func (e *Engine) onSourceState(in SourceState) {
	items := slices.Clone(in.Items)
	slices.SortStableFunc(items, func(a, b impl.DeliveredItem) int { return strings.Compare(a.ID, b.ID) })
	// One version per id: the last one given wins.
	dedup := items[:0]
	for _, it := range items {
		if n := len(dedup); n > 0 && dedup[n-1].ID == it.ID {
			dedup[n-1] = it
			continue
		}
		dedup = append(dedup, it)
	}
	// Saved at once: a node that kept it unsaved until its apps were idle
	// could write it over a newer state another node was handed since. A
	// failed save is retried before the next diff; should it land after a
	// newer one all the same, the feeder's next scan writes that again.
	e.unsaved[in.Source] = dedup
	saved := e.saveSourceState(in.Source)
	if saved != nil {
		e.storeErr("save-source-state", saved)
	}
	apps := slices.Clone(in.Apps)
	slices.Sort(apps)
	apps = slices.Compact(apps)
	for _, app := range apps {
		k := snapKey{app: app, source: in.Source}
		st := e.snaps[k]
		if st == nil {
			st = &snapState{key: k}
			e.snaps[k] = st
		}
		if st.dead {
			st.dead, st.hasCur, st.attempts = false, false, 0
		}
		if st.reqID == 0 && st.timerID == 0 {
			if saved == nil {
				e.snapSendNext(st, dedup) // just written: no need to read it back
			} else {
				e.snapAdvance(st)
			}
			if e.crashed {
				return
			}
		}
	}
}

// The source's current state is shared through the store, not taken from
// this node's memory: the snapshot worker hands it to one node at a time,
// and a node it no longer feeds (another booted and took over) keeps
// converging its apps from its last view. From a stale view it would undo
// a newer change another node is delivering: seed 68265, two nodes, where
// node-2 retried with a view from before file-4 existed, sent a DELETE of
// the file-4 that node-1's retried CREATE had just been sent with, and the
// app was left without it while the store said it had it.
const sourceStateApp = "(source state)"

func currentSource(source string) string { return "current:" + source }

// saveSourceState writes the latest state this node was handed for source,
// if it has not yet: the items it holds, and the removal of every other.
func (e *Engine) saveSourceState(source string) error {
	items, ok := e.unsaved[source]
	if !ok {
		return nil
	}
	stored, err := e.store.GetDelivered(e.ctx, sourceStateApp, currentSource(source))
	if err != nil {
		return err
	}
	var gone []string
	for _, it := range stored {
		if !hasItem(items, it.ID) {
			gone = append(gone, it.ID)
		}
	}
	if err := e.store.RecordDelivered(e.ctx, sourceStateApp, currentSource(source), items, gone); err != nil {
		return err
	}
	delete(e.unsaved, source)
	return nil
}

// snapAdvance sends the app's next change, if any, against the source's
// current state as the store holds it.
func (e *Engine) snapAdvance(st *snapState) {
	if err := e.saveSourceState(st.key.source); err != nil {
		e.storeErr("save-source-state", err)
		e.snapRetryAt(st, e.cfg.StoreRetry)
		return
	}
	current, err := e.store.GetDelivered(e.ctx, sourceStateApp, currentSource(st.key.source))
	if err != nil {
		e.storeErr("get-delivered", err)
		e.snapRetryAt(st, e.cfg.StoreRetry)
		return
	}
	e.snapSendNext(st, current)
}

// snapSendNext sends the app's next change toward current, if any.
func (e *Engine) snapSendNext(st *snapState, current []impl.DeliveredItem) {
	delivered, err := e.store.GetDelivered(e.ctx, e.baseline(st.key), st.key.source)
	if err != nil {
		e.storeErr("get-delivered", err)
		e.snapRetryAt(st, e.cfg.StoreRetry)
		return
	}
	var attempted []impl.DeliveredItem
	if !e.cfg.Bugs.ForgetUnconfirmedCreates {
		attempted, err = e.store.GetDelivered(e.ctx, e.baseline(st.key), attemptedSource(st.key.source))
		if err != nil {
			e.storeErr("get-delivered", err)
			e.snapRetryAt(st, e.cfg.StoreRetry)
			return
		}
	}
	changes := unconfirmed(Diff(delivered, current), delivered, current, attempted)
	slices.SortStableFunc(changes, func(a, b Change) int { return strings.Compare(a.ID, b.ID) })
	if len(changes) == 0 {
		st.hasCur, st.attempts = false, 0
		return
	}
	c := changes[0]
	c.Source = st.key.source
	unsureNow := unsure(delivered, attempted, c.ID)
	if want := intentOf(c); !e.cfg.Bugs.ForgetUnconfirmedCreates && !unsureNow && (!hasItem(attempted, c.ID) || stateOf(attempted, c.ID) != want) {
		intent := []impl.DeliveredItem{{ID: c.ID, Version: want}}
		if err := e.store.RecordDelivered(e.ctx, e.baseline(st.key), attemptedSource(st.key.source), intent, nil); err != nil {
			e.storeErr("record-delivered", err)
			e.snapRetryAt(st, e.cfg.StoreRetry)
			return
		}
	}
	if !st.hasCur || st.cur != c {
		st.cur, st.hasCur, st.attempts, st.curID = c, true, 0, ""
	}
	if st.curID == "" {
		// One instance per decision to send: the node and its clock, which
		// never repeat for the same app and source.
		st.curID = SnapshotEventID(st.key.source, c, e.cfg.Node+"."+strconv.FormatInt(e.now.UnixNano(), 36))
	}
	body, _ := json.Marshal(c) // cannot fail: strings only
	eventID := st.curID
	var secret []byte
	if b := e.bots[st.key.app]; b != nil {
		secret = b.secret
	}
	e.nextReq++
	id := e.nextReq
	k := st.key
	e.reqs.put(id, request{key: impl.MessageKey{Subscriber: k.app, EventID: eventID}, stream: k.source,
		attempt: st.attempts + 1, sentAt: e.now, snap: &snapReq{key: k, change: c, unsure: unsureNow}})
	st.reqID = id
	ts := e.now.Unix()
	e.out.Sends = append(e.out.Sends, Send{
		RequestID: id, Bot: k.app, EventID: eventID, Stream: k.source,
		Timestamp: ts, Signature: webhook.Sign(secret, eventID, ts, body), Body: body,
		Timeout: e.cfg.WebhookTimeout, Attempt: st.attempts + 1, Snapshot: true,
	})
	e.cnt.Sent++
}

func (e *Engine) snapRetryAt(st *snapState, after time.Duration) {
	st.timerID = e.setTimer(timerInfo{kind: timerSnap, snap: st.key, at: e.now.Add(after)})
}

func (e *Engine) onSnapTimer(id uint64, t timerInfo) {
	st := e.snaps[t.snap]
	if st == nil || st.timerID != id {
		return
	}
	st.timerID = 0
	if st.reqID == 0 && !st.dead {
		e.snapAdvance(st)
	}
}

func (e *Engine) onSnapResult(id uint64, req request, r WebhookResult) {
	st := e.snaps[req.snap.key]
	if st == nil || st.reqID != id {
		return
	}
	st.reqID = 0
	if r.Outcome == OutcomeOK {
		if e.crashAt(CrashAfterSendBeforeAck) {
			return
		}
		var items []impl.DeliveredItem
		var deleted []string
		if req.snap.change.Op == OpDelete {
			deleted = []string{req.snap.change.ID}
		} else {
			items = []impl.DeliveredItem{{ID: req.snap.change.ID, Version: req.snap.change.Version}}
		}
		err := e.store.RecordDelivered(e.ctx, e.baseline(st.key), st.key.source, items, deleted)
		if err == nil && (deleted != nil || req.snap.unsure) {
			err = e.store.RecordDelivered(e.ctx, e.baseline(st.key), attemptedSource(st.key.source), nil, []string{req.snap.change.ID})
		}
		if err != nil {
			// The app has it but we cannot say so; the retry re-sends it,
			// a duplicate the receiver drops by webhook-id.
			e.storeErr("record-delivered", err)
			e.snapRetryAt(st, e.cfg.StoreRetry)
			return
		}
		e.cnt.Acked++
		e.note(Note{Kind: "acked", Bot: st.key.app, EventID: req.key.EventID, Stream: st.key.source, Count: 1, Detail: "snapshot"})
		st.hasCur, st.attempts = false, 0
		e.snapAdvance(st)
		return
	}
	e.cnt.Failed++
	if st.hasCur && st.cur == req.snap.change {
		st.attempts++
	} else {
		st.cur, st.hasCur, st.attempts, st.curID = req.snap.change, true, 1, req.key.EventID
	}
	if permanent(r) {
		st.attempts = max(st.attempts, e.cfg.MaxAttempts) // the same policy as the queue's
	}
	if st.attempts >= e.cfg.MaxAttempts {
		e.cnt.DeadLettered++
		st.dead = true
		e.note(Note{Kind: "dead", Bot: st.key.app, EventID: req.key.EventID, Stream: st.key.source, Count: st.attempts, Detail: "snapshot " + describe(r)})
		return
	}
	e.snapRetryAt(st, Backoff(e.cfg, st.attempts, e.jitter()))
}

// baseline names whose delivered state a change is computed from: the app's
// own, or, with the SharedSnapshotBaseline bug (seed 002's "today"), one
// snapshot per source that every app's success overwrites.
func (e *Engine) baseline(k snapKey) string {
	if e.cfg.Bugs.SharedSnapshotBaseline {
		return sharedBaseline
	}
	return k.app
}

const sharedBaseline = "(source snapshot)"

func hasItem(items []impl.DeliveredItem, id string) bool {
	_, found := slices.BinarySearchFunc(items, id, func(it impl.DeliveredItem, id string) int { return strings.Compare(it.ID, id) })
	return found
}

// The snapshot rules (PROTOCOL.md, "Snapshot sources"), one predicate per
// question in rules.go's manner: the settle waits on snapConverged and the
// judge asks the same.

package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/model/oracle"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// snapProgressBound is how long after a repository state is published the
// healthy app may take to hold it (or a later state), beyond allowances
// for kills and database faults.
const snapProgressBound = 10 * time.Second

func snapIDs(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// snapAppState replays an app's handler runs of a repository, in arrival
// order, up to (not including) run index upto: the files the app holds,
// as "current state wins" applies each change absolutely.
type snapAppState struct {
	have map[string]string
	ever map[string]bool // every file the app was given by a CREATE or UPDATE
}

func newSnapAppState() *snapAppState {
	return &snapAppState{have: map[string]string{}, ever: map[string]bool{}}
}

// apply applies one change.
func (s *snapAppState) apply(c protocol.RepoChange) {
	switch c.Op {
	case "CREATE", "UPDATE":
		s.have[c.ID], s.ever[c.ID] = c.Version, true
	case "DELETE":
		delete(s.have, c.ID)
	}
}

// snapContradicts: isolation's predicate. A change contradicts what the
// app was delivered when it is an UPDATE of a file the app was never
// given (the diff was taken against a baseline that is not this app's).
// A DELETE of a file the app never got, and a CREATE of one it holds, are
// allowed: an engine that cannot tell whether a timed-out change was
// processed must send them (seed 002's edge cases).
func snapContradicts(s *snapAppState, c protocol.RepoChange) bool {
	return c.Op == "UPDATE" && !s.ever[c.ID]
}

// snapHolds: the app holds exactly the state items.
func snapHolds(s *snapAppState, items map[string]string) bool {
	if len(s.have) != len(items) {
		return false
	}
	for id, v := range items {
		if s.have[id] != v {
			return false
		}
	}
	return true
}

// snapStates replays every app's runs to the end.
func (r *recorder) snapStates() map[[2]string]*snapAppState {
	out := map[[2]string]*snapAppState{}
	for _, run := range r.snap.runs {
		k := [2]string{run.app, run.c.Source}
		if out[k] == nil {
			out[k] = newSnapAppState()
		}
		out[k].apply(run.c)
	}
	return out
}

// snapConverged: convergence's predicate, which the settle waits on: every
// app watching a repository holds its last published state. It returns
// what is still apart.
func (r *recorder) snapConverged() (apart []string) {
	if !r.snap.on {
		return nil
	}
	states := r.snapStates()
	for _, repo := range sortedRepos(r.snap.watch) {
		pubs := r.snap.pubs[repo]
		if len(pubs) == 0 {
			continue
		}
		last := pubs[len(pubs)-1]
		for _, app := range r.snap.watch[repo] {
			s := states[[2]string{app, repo}]
			if s == nil {
				s = newSnapAppState()
			}
			if !snapHolds(s, last.items) {
				apart = append(apart, fmt.Sprintf("%s on %s: %s", app, repo, snapDescribe(s.have, last.items)))
			}
		}
	}
	return apart
}

func sortedRepos(m map[string][]string) []string {
	rs := make([]string, 0, len(m))
	for r := range m {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	return rs
}

func snapDescribe(have, want map[string]string) string {
	ids := map[string]string{}
	for id := range have {
		ids[id] = ""
	}
	for id := range want {
		ids[id] = ""
	}
	var parts []string
	for _, id := range snapIDs(ids) {
		h, hok := have[id]
		w, wok := want[id]
		switch {
		case hok && !wok:
			parts = append(parts, fmt.Sprintf("has %s@%s, which the repository no longer has", id, h))
		case !hok && wok:
			parts = append(parts, fmt.Sprintf("lacks %s@%s", id, w))
		case h != w:
			parts = append(parts, fmt.Sprintf("has %s@%s, the repository %s@%s", id, h, id, w))
		}
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, "; ")
}

// snapConvergence: after the settle every app holds its repositories'
// final states.
func (r *recorder) snapConvergence() []oracle.Violation {
	var out []oracle.Violation
	for _, a := range r.snap.settleApart {
		out = append(out, r.violation(oracle.InvSnapshotConvergence, strings.SplitN(a, " ", 2)[0], "",
			"the app did not converge on the repository's final state by the end of the settle: %s", a))
	}
	return out
}

// snapIsolation: no app is sent a change that contradicts what it was
// delivered (snapContradicts), nor a body that is not a change of a
// repository it watches.
func (r *recorder) snapIsolation() []oracle.Violation {
	var out []oracle.Violation
	states := map[[2]string]*snapAppState{}
	for _, run := range r.snap.runs {
		if run.bad != "" || !slices.Contains(r.snap.watch[run.c.Source], run.app) {
			why := run.bad
			if why == "" {
				why = fmt.Sprintf("a change of %q, which the app does not watch", run.c.Source)
			}
			out = append(out, r.violation(oracle.InvSnapshotIsolation, run.app, "", "the app was sent %s", why))
			continue
		}
		k := [2]string{run.app, run.c.Source}
		if states[k] == nil {
			states[k] = newSnapAppState()
		}
		if snapContradicts(states[k], run.c) {
			out = append(out, r.violation(oracle.InvSnapshotIsolation, run.app, "",
				"the app was sent UPDATE %s@%s of %s, a file it was never given: the change was computed from a baseline that is not this app's",
				run.c.ID, run.c.Version, run.c.Source))
		}
		states[k].apply(run.c)
	}
	return out
}

// snapChanged lists the files whose state (a version, or absence) differs
// between pubs[i-1] and pubs[i]: what publication i changed.
func snapChanged(pubs []snapPub, i int) []string {
	prev := map[string]string{}
	if i > 0 {
		prev = pubs[i-1].items
	}
	var ids []string
	for id, v := range pubs[i].items {
		if pv, ok := prev[id]; !ok || pv != v {
			ids = append(ids, id)
		}
	}
	for id := range prev {
		if _, ok := pubs[i].items[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// snapHoldsChange: the app holds each file publication i changed as
// publication i or a later one (up to cur, the last published so far)
// has it: its version, or its absence. Judged per file, not as a whole
// state: while a repository keeps changing, an engine sending one change
// at a time may never hold an exact published state, and a whole-state
// witness would charge each publication with every change made after it
// (a 20 s database stall's worth, at double load: issue 38).
func snapHoldsChange(s *snapAppState, pubs []snapPub, changed []string, i, cur int) bool {
	for _, id := range changed {
		v, has := s.have[id]
		met := false
		for j := i; j <= cur && !met; j++ {
			pv, ok := pubs[j].items[id]
			met = ok == has && pv == v
		}
		if !met {
			return false
		}
	}
	return true
}

// snapProgress: each change a repository's publication made during the
// run reaches the healthy app (snapHoldsChange: the app holds the files
// it changed as that state or a later one has them) within
// snapProgressBound of its publication, beyond allowances for kills and
// database faults (as no-head-of-line-blocking's). A change the app never
// holds is judged from its publication to the end of the settle.
func (r *recorder) snapProgress(p judgeParams, end time.Time) (out []oracle.Violation, cases int) {
	for _, repo := range sortedRepos(r.snap.watch) {
		if !slices.Contains(r.snap.watch[repo], snapHealthy) {
			continue
		}
		pubs := r.snap.pubs[repo]
		changed := make([][]string, len(pubs))
		for i := range pubs {
			changed[i] = snapChanged(pubs, i)
		}
		// reached[i]: when the app first held pubs[i]'s change (or a later
		// state of its files), from pubs[i]'s publication on.
		reached := make([]time.Time, len(pubs))
		s := newSnapAppState()
		runs := []snapRun{}
		for _, run := range r.snap.runs {
			if run.app == snapHealthy && run.c.Source == repo {
				runs = append(runs, run)
			}
		}
		// Walk the publications and runs in time order; at each step the
		// current state is the last publication so far.
		pi, ri, cur := 0, 0, -1
		check := func(at time.Time) {
			for i := 0; i <= cur; i++ {
				if reached[i].IsZero() && snapHoldsChange(s, pubs, changed[i], i, cur) {
					reached[i] = at
				}
			}
		}
		for pi < len(pubs) || ri < len(runs) {
			if ri == len(runs) || (pi < len(pubs) && !runs[ri].at.Before(pubs[pi].at)) {
				cur = pi
				pi++
				check(pubs[cur].at)
				continue
			}
			s.apply(runs[ri].c)
			check(runs[ri].at)
			ri++
		}
		for i, pub := range pubs {
			if pub.at.Before(r.start) {
				continue // published before the engine started
			}
			cases++
			got := reached[i]
			if got.IsZero() {
				got = end
			}
			allow := r.snapAllowance(p, pub.at, got)
			if net := got.Sub(pub.at) - allow; net > snapProgressBound {
				how := fmt.Sprintf("held it %s after its publication", got.Sub(pub.at).Round(time.Millisecond))
				if reached[i].IsZero() {
					how = fmt.Sprintf("still did not hold it (nor a later state of those files) %s after its publication, at the end of the settle", got.Sub(pub.at).Round(time.Millisecond))
				}
				out = append(out, r.violation(oracle.InvSnapshotProgress, snapHealthy, "",
					"version %d of %s changed %s: the healthy app %s (%s beyond allowances of %s for kills and database faults), above the bound %s",
					pub.version, repo, strings.Join(changed[i], ", "), how, net.Round(time.Millisecond), allow, snapProgressBound))
			}
		}
	}
	return out, cases
}

// snapAllowance is what kills and database faults between a publication
// and the app holding its change add to snapProgressBound.
func (r *recorder) snapAllowance(p judgeParams, pub, got time.Time) time.Duration {
	var allow time.Duration
	if pub.Before(r.start.Add(p.Lease)) {
		// The first start is a restart after a downtime that began before
		// the run: its start-up gets what a kill's does (3.75 s for the
		// reference at double load, publications judged all the while).
		allow += p.Lease + p.WebhookTimeout
	}
	for _, k := range r.kills {
		// A repository changes whether or not the engine is up: a kill
		// counts if it was down at any time from a lease before the
		// publication until the app held the state.
		up := k.up
		if up.IsZero() || up.After(got) {
			up = got
		}
		if up.After(pub.Add(-p.Lease)) && k.at.Before(got) {
			allow += up.Sub(k.at) + p.Lease + p.WebhookTimeout
		}
	}
	for _, w := range r.dbFaults {
		if w.to.Add(p.Lease).After(pub) && w.from.Before(got) {
			allow += w.to.Sub(w.from) + 2*p.StoreRetry + p.Lease
		}
	}
	return allow
}

// judgeSnapshots gives the three snapshot verdicts.
func judgeSnapshots(j *judgement, r *recorder, p judgeParams) {
	if !p.Snapshots || !r.snap.on {
		why := "the engine does not declare snapshot sources (chaos --snapshots declared; PROTOCOL.md, Snapshot sources)"
		for _, inv := range []string{oracle.InvSnapshotConvergence, oracle.InvSnapshotIsolation, oracle.InvSnapshotProgress} {
			j.notJudged(inv, why)
		}
		return
	}
	j.judged(oracle.InvSnapshotConvergence, r.snapConvergence())
	j.judged(oracle.InvSnapshotIsolation, r.snapIsolation())
	end := r.snap.settleEnd
	if end.IsZero() {
		end = time.Now()
	}
	vs, _ := r.snapProgress(p, end)
	j.judged(oracle.InvSnapshotProgress, vs)
}

// snapSettled is the settle's snapshot question (snapConverged), recorded
// for the judge.
func (r *recorder) snapSettled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.snap.on {
		return true
	}
	r.snap.settleApart, r.snap.settleEnd = r.snapConverged(), time.Now()
	return len(r.snap.settleApart) == 0
}

// snapCases are the snapshot rules' cases for the report (WireCases):
// (app, repository) pairs judged for convergence, changes the apps'
// handlers ran for isolation, and publications judged for progress. The
// apps' requests and the failures among them are counted too, so a PASS
// on a run whose apps never failed shows as such.
func (r *recorder) snapCases(p judgeParams) map[string]int {
	if !p.Snapshots || !r.snap.on {
		return nil
	}
	pairs := 0
	for _, apps := range r.snap.watch {
		pairs += len(apps)
	}
	end := r.snap.settleEnd
	if end.IsZero() {
		end = time.Now()
	}
	_, pubs := r.snapProgress(p, end)
	return map[string]int{
		oracle.InvSnapshotConvergence: pairs,
		oracle.InvSnapshotIsolation:   len(r.snap.runs),
		oracle.InvSnapshotProgress:    pubs,
		"snapshot-requests":           r.snap.sends,
		"snapshot-requests-2xx":       r.snap.oks,
		"snapshot-app-fault-windows":  len(r.snap.faults),
	}
}

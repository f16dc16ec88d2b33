package sim

import (
	"encoding/json"
	"slices"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// source is a seed-002 snapshot source: a repository whose current state
// the snapshot worker hands to one engine node on every change, every scan
// interval and every boot.
type source struct {
	spec  SourceSpec
	items []impl.DeliveredItem
}

func (s *sim) setupSources() {
	// Half the worlds' snapshot workers list a source the way a directory
	// walk or a paginated API does: in no particular order, an entry now
	// and then twice (an older version first: the last one given wins, as
	// engine.SourceState says), and the apps likewise. Its own stream: the
	// rest of the world is the same either way.
	s.listRng = s.actorRand("sources/listing")
	s.messy = len(s.w.Sources) > 0 && s.listRng.IntN(2) == 0
	for _, spec := range s.w.Sources {
		src := &source{spec: spec}
		s.sources = append(s.sources, src)
		s.observe(oracle.Observation{Kind: oracle.ObsSourceState, Stream: spec.Name, Apps: slices.Clone(spec.Apps)})
		for _, u := range spec.Updates {
			s.at(Epoch.Add(u.At), func() { s.updateSource(src, u.Items) })
		}
		var scan func()
		scan = func() {
			s.feed(src)
			s.after(spec.ScanEvery, scan)
		}
		s.after(spec.ScanEvery, scan)
	}
}

func (s *sim) updateSource(src *source, items []impl.DeliveredItem) {
	src.items = slices.Clone(items)
	s.activity++
	s.rec("source/"+src.spec.Name, "update", "items", len(items))
	s.observe(oracle.Observation{Kind: oracle.ObsSourceState, Stream: src.spec.Name,
		Apps: slices.Clone(src.spec.Apps), Items: slices.Clone(items)})
	s.feed(src)
}

// feeder is the node the snapshot worker talks to: the first one up.
func (s *sim) feeder() *node {
	for _, n := range s.nodes {
		if n.up {
			return n
		}
	}
	return nil
}

func (s *sim) feed(src *source) {
	n := s.feeder()
	if n == nil {
		return
	}
	apps, items := slices.Clone(src.spec.Apps), slices.Clone(src.items)
	if s.messy {
		apps, items = s.messyListing(apps, items)
	}
	s.observe(oracle.Observation{Kind: oracle.ObsSourceFed, Node: n.name, Stream: src.spec.Name})
	s.stepNode(n, engine.SourceState{Source: src.spec.Name, Apps: apps, Items: items}, "source-state")
}

// messyListing shuffles a source's listing and repeats some entries: an
// app twice, an item once more before itself with an older version.
func (s *sim) messyListing(apps []string, items []impl.DeliveredItem) ([]string, []impl.DeliveredItem) {
	r := s.listRng
	r.Shuffle(len(apps), func(i, j int) { apps[i], apps[j] = apps[j], apps[i] })
	if len(apps) > 0 && r.IntN(3) == 0 {
		apps = append(apps, apps[r.IntN(len(apps))])
	}
	r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	if len(items) > 0 && r.IntN(2) == 0 {
		i := r.IntN(len(items))
		stale := items[i]
		stale.Version += "-stale"
		items = slices.Insert(items, i, stale)
	}
	return apps, items
}

// sourcesAfterBoot and sourcesAfterCrash hand every source to a node that
// has just become the feeder: its predecessor's memory is gone or no
// longer asked.
func (s *sim) sourcesAfterBoot() { s.refeed() }

func (s *sim) sourcesAfterCrash() { s.refeed() }

func (s *sim) refeed() {
	if len(s.sources) == 0 {
		return
	}
	n := s.feeder()
	if n == nil {
		s.feedNode = -1
		return
	}
	if n.idx == s.feedNode && n.inc == s.feedInc {
		return
	}
	s.feedNode, s.feedInc = n.idx, n.inc
	for _, src := range s.sources {
		if n.up {
			s.feed(src)
		}
	}
}

// decodeChange fills a snapshot observation from a change notification's
// body; a body that is not a change leaves Op empty, which the checker
// reports. The source is the one the body names: the app sees only the
// request, so a change applies to the source its body says (a body that
// names none, or another source, is judged as such, whatever the engine
// meant).
func decodeChange(o *oracle.Observation, body []byte) {
	var c engine.Change
	if json.Unmarshal(body, &c) != nil {
		return
	}
	o.Op, o.Item, o.Version = string(c.Op), c.ID, c.Version
	o.Stream = c.Source
}

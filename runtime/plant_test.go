package runtime

import (
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// The plants change what they name and nothing else: the reference
// (zero Plants) subscribes from its cursor and counts each 2xx once.
func TestPlants(t *testing.T) {
	if _, err := ParsePlants("overcount-acked, nope"); err == nil || !strings.Contains(err.Error(), "resume-from-start") {
		t.Errorf("an unknown plant: %v; want an error listing the known ones", err)
	}
	p, err := ParsePlants("resume-from-start")
	if err != nil || !p.ResumeFromStart || p.OvercountAcked {
		t.Fatalf("ParsePlants(resume-from-start) = %+v, %v", p, err)
	}
	logSub := engine.Subscribe{Stream: "s", Kind: engine.LogStream, From: impl.Position{Major: 7, Minor: 2}}
	tsSub := engine.Subscribe{Stream: "t", Kind: engine.TimestampStream, Since: 1234}
	for _, c := range []struct {
		sub   engine.Subscribe
		plant Plants
		want  string
	}{
		{logSub, Plants{}, "after=7.2"},
		{logSub, p, "after=0.0"},
		{tsSub, Plants{}, "since=1234"},
		{tsSub, p, "since=0"},
		{engine.Subscribe{Stream: "s", Fresh: true}, p, "from=head"},
	} {
		if got := firstQuery(c.sub, c.plant).Encode(); got != c.want {
			t.Errorf("firstQuery(%+v, %+v) = %s; want %s", c.sub, c.plant, got, c.want)
		}
	}
	m := NewMetrics()
	m.setCounters(engine.Counters{Acked: 3})
	if m.counters.Acked != 3 {
		t.Errorf("the reference's acked: %d, want 3", m.counters.Acked)
	}
	m.overcount = true
	m.setCounters(engine.Counters{Acked: 3})
	if m.counters.Acked != 6 {
		t.Errorf("overcount-acked's acked: %d, want 6", m.counters.Acked)
	}
}

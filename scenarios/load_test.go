package scenarios

import (
	"bytes"
	"errors"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
)

const minimal = `name: tiny
title: one event to one bot
topology:
  streams:
    - {name: channel-1}
  bots:
    - {id: bot-1}
  members:
    - {stream: channel-1, bot: bot-1}
workload:
  events:
    - {stream: channel-1, at: 1s}
`

func TestMinimalScenarioRunsClean(t *testing.T) {
	s, err := Load("tiny.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if r.Counters.Obligations != 1 || r.Counters.Deliveries != 1 || len(r.Violations) != 0 {
		t.Fatalf("one event to one bot: %+v, %v", r.Counters, r.Violations)
	}
}

// Each malformed file is refused with the line and the field at fault.
func TestMalformedScenariosNameLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		doc   string
		line  int
		field string
		msg   string
	}{
		{"unknown field", strings.Replace(minimal, "    - {name: channel-1}", "    - {name: channel-1, seel_every: 5s}", 1),
			5, "topology.streams[0].seel_every", `unknown field "seel_every"`},
		{"bad duration", minimal + "faults:\n  schedule:\n    - {kind: webhook-5xx, bot: bot-1, at: 5s, until: 2x}\n",
			15, "faults.schedule[0].until", `"2x" is not a duration`},
		{"duration without unit", strings.Replace(minimal, "at: 1s", "at: 5", 1),
			12, "workload.events[0].at", "give it a unit, like 5s"},
		{"unknown stream", strings.Replace(minimal, "{stream: channel-1, bot: bot-1}", "{stream: channel-2, bot: bot-1}", 1),
			9, "topology.members[0].stream", `no stream is called "channel-2"`},
		{"unknown fault kind", minimal + "faults:\n  schedule:\n    - {kind: meteor, at: 5s}\n",
			15, "faults.schedule[0]", `kind "meteor" is not a fault kind`},
		{"fault names a missing node", minimal + "faults:\n  schedule:\n    - {kind: crash, node: node-2, at: 5s}\n",
			15, "faults.schedule[0]", `node "node-2" is not one of node-1..node-1`},
		{"unknown bug", minimal + "engine:\n  bugs: [fresh-sync-on-boot, typo-bug]\n",
			14, "engine.bugs", `unknown bug "typo-bug"`},
		{"not a number", minimal + "engine:\n  max_attempts: three\n",
			14, "engine.max_attempts", `"three" is not a whole number`},
		{"list instead of mapping", "name: x\ntitle: y\ntopology:\n  - nodes\n",
			4, "topology", "want a mapping"},
		{"missing title", strings.Replace(minimal, "title: one event to one bot\n", "", 1),
			1, "title", "is required"},
		{"syntax error", strings.Replace(minimal, "    - {name: channel-1}", "    - {name: channel-1", 1),
			4, "streams", "not valid YAML or JSON"},
		{"bad invariant in catches", minimal + "catches:\n  - {bug: no-retention, invariant: no-such-thing}\n",
			14, "catches[0].invariant", `"no-such-thing" is not an invariant`},
		{"engine config the engine refuses", minimal + "engine:\n  lease: 1s\n",
			14, "engine.lease", "Lease (1s) must exceed WebhookTimeout (2s)"},
		{"engine refuses a setting the file left out", minimal + "engine:\n  max_attempts: 4\n  webhook_timeout: 40s\n",
			14, "engine.lease", "Lease (30s) must exceed WebhookTimeout (40s)"},
		{"engine rule on a later line", minimal + "engine:\n  max_attempts: 4\n  jitter: 1.5\n",
			15, "engine.jitter", "JitterFraction is 1.5; it must be between 0 and 1"},
		{"engine enum", minimal + "engine:\n  max_attempts: 4\n  cursor_mode: later\n",
			15, "engine.cursor_mode", `"later" is not a cursor mode; use sync or async`},
		{"engine duration", minimal + "engine:\n  max_backoff: 2x\n",
			14, "engine.max_backoff", `"2x" is not a duration`},
		{"alias", minimal + "receiver: &r {window: 1h}\nexpect: *r\n", 14, "expect", "aliases are not supported"},
		{"JSON works too", `{"name": "j", "title": "t", "topology": {"streams": [{"name": "s"}], "bots": [{"id": "b", "latency": "5x"}]}}`,
			1, "topology.bots[0].latency", `"5x" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("f.yaml", []byte(tc.doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want a located *Error, got %v", err)
			}
			if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("got line %d field %q msg %q\nwant line %d field %q msg containing %q", e.Line, e.Field, e.Msg, tc.line, tc.field, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("error does not start with the file: %s", err)
			}
		})
	}
}

// Marshal then Load gives back the same scenario, for every library file.
func TestLibraryRoundTrips(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		a, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Load(s.Name+".yaml", a)
		if err != nil {
			t.Fatalf("%s: written form does not load: %v\n%s", s.Name, err, a)
		}
		b, _ := back.Marshal()
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: round trip changed it:\n%s\n----\n%s", s.Name, a, b)
		}
	}
}

func FuzzLoad(f *testing.F) {
	entries, _ := fs.ReadDir(library, ".")
	for _, e := range entries {
		data, _ := library.ReadFile(e.Name())
		f.Add(data)
	}
	f.Add([]byte(minimal))
	f.Add([]byte("name: x\ntitle: y\ntopology: {streams: [{name: s, kind: timestamp, producers: [1s, -2s]}], bots: [{id: b, latency: [1ms, 2ms]}]}\nfaults: {random: draw, schedule: [{kind: upstream-reorder, stream: s, order: [1, 0]}]}\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("name: x\ntitle: y\ntopology:\n  streams: &a [{name: s}]\n  bots: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Load("fuzz.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Msg == "" {
				t.Fatalf("error is not a located scenario error: %v", err)
			}
			if e.Line == 0 && e.Field == "" {
				t.Fatalf("error names neither a line nor a field: %v", err)
			}
			return
		}
		if _, err := s.Build(); err != nil {
			t.Fatalf("a scenario that loads does not build: %v", err)
		}
		a, err := s.Marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := Load("again.yaml", a)
		if err != nil {
			t.Fatalf("the written form does not load: %v\n%s", err, a)
		}
		b, _ := back.Marshal()
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the scenario:\n%s\n----\n%s", a, b)
		}
	})
}

// Every engine setting a file may give (every engine.Config field with a
// yaml key) is written when it differs from the default and read back to
// the same value: a new setting needs no code here.
func TestEngineSettingsRoundTrip(t *testing.T) {
	s, err := Load("tiny.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultConfig()
	v := reflect.ValueOf(&c).Elem()
	for _, st := range settings {
		f := v.Field(st.index)
		switch {
		case st.typ == durationType:
			f.SetInt(f.Int() + int64(7*time.Second))
		case f.CanInt():
			f.SetInt(f.Int() + 1)
		case f.CanFloat():
			f.SetFloat(f.Float() + 0.25)
		default:
			t.Fatalf("setting %s of type %s: teach this test to change it", st.key, st.typ)
		}
	}
	c.JitterFraction = 0.5
	c.MaxBackoff = time.Minute
	s.Engine = Engine{Config: c, Bugs: []string{"no-retention"}}
	data, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Load("back.yaml", data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	got := back.Engine.full()
	for _, st := range settings {
		if a, b := v.Field(st.index).Interface(), reflect.ValueOf(got).Field(st.index).Interface(); a != b {
			t.Errorf("engine.%s: wrote %v, read back %v\n%s", st.key, a, b, data)
		}
	}
	if !slices.Equal(back.Engine.Bugs, []string{"no-retention"}) {
		t.Errorf("bugs read back as %v", back.Engine.Bugs)
	}
	if !bytes.Contains(data, []byte("engine:")) {
		t.Errorf("no engine section written:\n%s", data)
	}
	// A default configuration writes no engine section at all.
	s.Engine = Engine{}
	if data, _ := s.Marshal(); bytes.Contains(data, []byte("engine:")) {
		t.Errorf("a default engine section was written:\n%s", data)
	}
}

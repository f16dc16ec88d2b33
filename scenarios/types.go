package scenarios

import (
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"go.yaml.in/yaml/v3"

	"github.com/deliverysim/deliverysim/sim"
)

// Scenario is one scenario file, as written (defaults are applied when it
// is built into a simulation, not here, so a file written back out stays as
// small as it was). SCHEMA.md documents every field.
type Scenario struct {
	Name        string   `yaml:"name"`
	Title       string   `yaml:"title"`
	Source      string   `yaml:"source,omitempty"`
	Description string   `yaml:"description,omitempty"`
	Seed        uint64   `yaml:"seed,omitempty"`
	Topology    Topology `yaml:"topology"`
	Workload    Workload `yaml:"workload,omitempty"`
	Engine      Engine   `yaml:"engine,omitempty"`
	Receiver    Receiver `yaml:"receiver,omitempty"`
	Faults      Faults   `yaml:"faults,omitempty"`
	Expect      Expect   `yaml:"expect,omitempty"`
	Catches     []Catch  `yaml:"catches,omitempty"`

	// Path is where the scenario was loaded from ("scenarios/NAME.yaml"
	// for the embedded ones).
	Path string `yaml:"-"`
	// RequireFired: a clean run matches only if every scheduled site
	// fault fired (Matches). Set for the library (All): its files are
	// written to build one situation each, and a run that never reaches
	// it passes nothing. Regressions, converted from seeds, aim some
	// faults at sends the engine has since timed otherwise.
	RequireFired bool `yaml:"-"`
}

// Topology is the fixed world: engine nodes, streams, bots, who is a member
// of what from the start, and snapshot sources.
type Topology struct {
	Nodes   int      `yaml:"nodes,omitempty"`
	Streams []Stream `yaml:"streams"`
	Bots    []Bot    `yaml:"bots"`
	Members []Member `yaml:"members,omitempty"`
	Sources []Source `yaml:"sources,omitempty"`
}

type Stream struct {
	Name      string     `yaml:"name"`
	Kind      string     `yaml:"kind,omitempty"`
	SealEvery Duration   `yaml:"seal_every,omitempty"`
	Producers []Duration `yaml:"producers,omitempty,flow"`
	Latency   *Span      `yaml:"latency,omitempty"`
	// FirstMiniblock: a log stream starts with this many miniblocks sealed.
	FirstMiniblock int64 `yaml:"first_miniblock,omitempty"`
	// StampSeconds: timestamp producers stamp created_at in whole seconds.
	StampSeconds bool `yaml:"stamp_seconds,omitempty"`
	Line         int  `yaml:"-"`
}

type Bot struct {
	ID      string `yaml:"id"`
	Latency *Span  `yaml:"latency,omitempty"`
	Secret  string `yaml:"secret,omitempty"`
	// Receiver is the SDK entry ("handle", "handler", "middleware"; ""
	// = handle); HandlerFailRate is how often the handler fails while
	// faults are injected; Whsec: the secret is configured in whsec_ form.
	Receiver        string  `yaml:"receiver,omitempty"`
	HandlerFailRate float64 `yaml:"handler_fail_rate,omitempty"`
	Whsec           bool    `yaml:"whsec,omitempty"`
	ForgeRate       float64 `yaml:"forge_rate,omitempty"`
	// RotateAt: the bot's key is rotated then (sim.BotSpec.RotateAt).
	RotateAt Duration `yaml:"rotate_at,omitempty"`
	Line     int      `yaml:"-"`
}

type Member struct {
	Stream string `yaml:"stream"`
	Bot    string `yaml:"bot"`
	Line   int    `yaml:"-"`
}

type Source struct {
	Name      string   `yaml:"name"`
	Apps      []string `yaml:"apps,flow"`
	ScanEvery Duration `yaml:"scan_every,omitempty"`
	Line      int      `yaml:"-"`
}

// Workload is the traffic: exact events at exact times, snapshot states,
// and the run's time frame.
type Workload struct {
	Produce        Duration   `yaml:"produce,omitempty"`
	FaultWindow    Duration   `yaml:"fault_window,omitempty"`
	Liveness       Duration   `yaml:"liveness,omitempty"`
	HOLBound       Duration   `yaml:"hol_bound,omitempty"`
	BatchMax       int        `yaml:"batch_max,omitempty"`
	RequeueDead    bool       `yaml:"requeue_dead,omitempty"`
	RequeueEvery   Duration   `yaml:"requeue_every,omitempty"`
	CursorWriteMax Duration   `yaml:"cursor_write_max,omitempty"`
	ResultBatch    Duration   `yaml:"result_batch,omitempty"`
	ResumeOverlap  int        `yaml:"resume_overlap,omitempty"`
	RestartMin     Duration   `yaml:"restart_min,omitempty"`
	RestartMax     Duration   `yaml:"restart_max,omitempty"`
	Events         []Event    `yaml:"events,omitempty"`
	Snapshots      []Snapshot `yaml:"snapshots,omitempty"`
	// ClockJumps steps running nodes' clocks (sim.ClockJumps); nil: none.
	ClockJumps *ClockJumps `yaml:"clock_jumps,omitempty"`
}

// ClockJumps is sim.ClockJumps: no jump leaves a clock further than Bound
// from true time.
type ClockJumps struct {
	Bound Duration    `yaml:"bound"`
	Jumps []ClockJump `yaml:"jumps"`
}

// ClockJump steps node Node's clock (0-based) at At by By, or with Step
// back to true time.
type ClockJump struct {
	At   Duration `yaml:"at"`
	Node int      `yaml:"node"`
	By   Duration `yaml:"by,omitempty"`
	Step bool     `yaml:"step,omitempty"`
}

type Event struct {
	Stream   string   `yaml:"stream"`
	At       Duration `yaml:"at"`
	ID       string   `yaml:"id,omitempty"`
	Producer int      `yaml:"producer,omitempty"`
	Count    int      `yaml:"count,omitempty"`
	Every    Duration `yaml:"every,omitempty"`
	// Payload is the body as text; PayloadBase64 as bytes (either may be
	// empty and present: an empty body). Without both the payload is a
	// small JSON object naming the event.
	Payload       *string `yaml:"payload,omitempty"`
	PayloadBase64 *string `yaml:"payload_base64,omitempty"`
	Line          int     `yaml:"-"`
}

type Snapshot struct {
	Source string            `yaml:"source"`
	At     Duration          `yaml:"at"`
	Items  map[string]string `yaml:"items,flow"`
	Line   int               `yaml:"-"`
}

// Engine is the engine section of a file: every engine.Config field with a
// yaml key (engine.DefaultConfig for those the file leaves out), and the
// known-bug variants switched on. The zero Engine is the defaults.
type Engine struct {
	Config   engine.Config
	Bugs     []string
	BugsLine int
	// lines holds the line of each key the file gave, so that the
	// engine's own Validate can be reported at the key it is about.
	lines map[string]int
}

type Receiver struct {
	Window     Duration `yaml:"window,omitempty"`
	MaxEntries int      `yaml:"max_entries,omitempty"`
	// Tolerance is the webhook-timestamp tolerance (0: the SDK's 5m).
	Tolerance Duration `yaml:"tolerance,omitempty"`
}

// Faults: random rate-based faults seeded by the scenario's seed, an
// explicit schedule, or both.
type Faults struct {
	Random     string  `yaml:"random,omitempty"`
	Schedule   []Fault `yaml:"schedule,omitempty"`
	RandomLine int     `yaml:"-"`
}

// Fault is how a scenario file writes one faults.Fault (which documents
// what each kind reads); fileFault and Fault.fault convert.
type Fault struct {
	Kind         string   `yaml:"kind"`
	At           Duration `yaml:"at"`
	Until        Duration `yaml:"until,omitempty"`
	Node         string   `yaml:"node,omitempty"`
	Bot          string   `yaml:"bot,omitempty"`
	Stream       string   `yaml:"stream,omitempty"`
	Event        string   `yaml:"event,omitempty"`
	Attempt      int      `yaml:"attempt,omitempty"`
	After        string   `yaml:"after,omitempty"`
	Method       string   `yaml:"method,omitempty"`
	RestartAfter Duration `yaml:"restart_after,omitempty"`
	Offset       Duration `yaml:"offset,omitempty"`
	Drift        Duration `yaml:"drift,omitempty"`
	Incarnation  int      `yaml:"incarnation,omitempty"`
	Delay        Duration `yaml:"delay,omitempty"`
	Status       int      `yaml:"status,omitempty"`
	Order        []int    `yaml:"order,omitempty,flow"`
	Member       *bool    `yaml:"member,omitempty"`
	Back         int      `yaml:"back,omitempty"`
	Never        bool     `yaml:"never,omitempty"`
	Call         int      `yaml:"call,omitempty"`
	Line         int      `yaml:"-"`
}

// Expect is the outcome on the engine the file configures: no violation at
// all, or exactly these invariants violated.
type Expect struct {
	Violations []string `yaml:"violations,omitempty,flow"`
	Line       int      `yaml:"-"`
}

// Catch says that with Bug switched on this scenario must violate
// Invariant: the scenario demonstrates that known bug.
type Catch struct {
	Bug       string `yaml:"bug"`
	Invariant string `yaml:"invariant"`
	Line      int    `yaml:"-"`
}

// Duration is a time.Duration written as "90s", "1m30s", "2h" or "7d";
// Never (for until) is written "never".
type Duration time.Duration

// Never is the until of a window that does not close.
const Never = Duration(1<<63 - 1)

func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string {
	if d == Never {
		return "never"
	}
	x := time.Duration(d)
	if x > 0 && x%(24*time.Hour) == 0 {
		return formatInt(int64(x/(24*time.Hour))) + "d"
	}
	s := x.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func formatInt(v int64) string {
	neg := v < 0
	if neg {
		v = -v
	}
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Span is a latency range: one duration (fixed) or [min, max].
type Span struct {
	Min, Max Duration
}

func (s Span) MarshalYAML() (any, error) {
	if s.Min == s.Max {
		return s.Min.String(), nil
	}
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	n.Content = []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: s.Min.String()},
		{Kind: yaml.ScalarNode, Value: s.Max.String()},
	}
	return n, nil
}

// flowNode renders v (a struct) as a one-line flow mapping, so long lists
// of events and faults stay one entry per line.
func flowNode(v any) (any, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	n.Style = yaml.FlowStyle
	return &n, nil
}

type plainEvent Event
type plainFault Fault
type plainMember Member
type plainCatch Catch

func (e Event) MarshalYAML() (any, error)  { return flowNode(plainEvent(e)) }
func (f Fault) MarshalYAML() (any, error)  { return flowNode(plainFault(f)) }
func (m Member) MarshalYAML() (any, error) { return flowNode(plainMember(m)) }
func (c Catch) MarshalYAML() (any, error)  { return flowNode(plainCatch(c)) }

// Marshal renders the scenario as YAML that Load reads back to an equal
// scenario.
func (s *Scenario) Marshal() ([]byte, error) {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// rxEntries maps bots[].receiver to the simulator's receiver entry.
var rxEntries = map[string]sim.RxEntry{"": sim.RxHandle, "handle": sim.RxHandle, "handler": sim.RxHandler, "middleware": sim.RxMiddleware}

var rxEntryNames = map[sim.RxEntry]string{sim.RxHandle: "", sim.RxHandler: "handler", sim.RxMiddleware: "middleware"}

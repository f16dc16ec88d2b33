package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl"
)

// Factory describes a backend under test.
type Factory struct {
	// Name identifies the backend in reports and artifact file names.
	Name string
	// New returns a fresh, empty store that no other call shares. It
	// registers its own cleanup (closing the store, dropping a schema) with
	// t.Cleanup, and may call t.Skip when its server is unavailable. The
	// suite calls it once per contract check, once per state-machine run
	// and once per linearizability history.
	New func(t testing.TB) impl.Store
	// Features says which optional groups and behaviours apply.
	Features Features
	// Variant names one configuration of the backend when it is certified
	// under several (pgcert: "TimeZone=America/New_York"); it is copied to
	// every Result. Empty for a backend certified once.
	Variant string
	// Describe, if set, reports what the stores run against (server
	// version, session time zone, default isolation level); Certify calls
	// it once, before any check, records the answer in the report, and
	// refuses to start when it fails (an unreachable server is a setup
	// error, exit 2, not 35 failed checks).
	Describe func(ctx context.Context) (Server, error)
}

// Server describes the database under a backend, as Factory.Describe
// reports it.
type Server struct {
	Version          string `json:"version"`           // as the server reports it (SHOW server_version)
	TimeZone         string `json:"time_zone"`         // the session time zone the stores' connections get
	DefaultIsolation string `json:"default_isolation"` // the default transaction isolation of such a session, before the store sets its own (pgstore sets serializable)
}

// Features are what a backend declares about itself; each one switches on
// (or relaxes) part of the suite.
//
// The optional capabilities (impl.BlindCursorWriter, impl.LeasingEnqueuer,
// impl.HandOffWriter) need no declaration: the suite finds what the store
// implements (impl.AsBlindCursorWriter and friends, through wrappers) and
// certifies every capability it finds, because the engine uses every one
// it finds. Declaring one (BlindCursor, LeasedEnqueue, HandOff) asserts
// that the store offers it, so that a wrapper that loses it fails
// Contract/Capabilities instead of passing without it; OptOut leaves a
// found capability uncertified, on purpose and in the report.
type Features struct {
	// Concurrent: the store is safe for concurrent use, so the
	// Linearizability group runs several goroutines against it.
	Concurrent bool
	// BlindCursor asserts that the store implements
	// impl.BlindCursorWriter: Contract/Capabilities fails when
	// impl.AsBlindCursorWriter does not find it. Found, it is certified
	// whether or not this is set (PutCursorBlind writes unconditionally,
	// and the state machine mixes blind writes in).
	BlindCursor bool
	// LeasedEnqueue asserts that the store implements
	// impl.LeasingEnqueuer (found by impl.AsLeasingEnqueuer), so a
	// wrapper that loses the capability is reported instead of skipped.
	// Found, EnqueueLeased is certified whether or not this is set.
	LeasedEnqueue bool
	// HandOff asserts that the store implements impl.HandOffWriter (found
	// by impl.AsHandOffWriter). Found, WriteHandOff is certified against
	// the model whether or not this is set.
	HandOff bool
	// OptOut names capabilities the store implements that this
	// certification leaves out: their checks are skipped, each with the
	// reason, and the state machine does not call them. The engine still
	// uses a capability it finds, so opting out certifies the store for a
	// stack that hides it (a wrapper without the method) and for nothing
	// else.
	OptOut []Capability
	// AmbiguousErrors: the store may fail calls with an unknown outcome (a
	// fault-injecting wrapper). Errors then mean "took effect or not" and
	// the model tracks both possibilities; without this flag any error is a
	// failure. The Contract group, a fixed script, is skipped.
	AmbiguousErrors bool
}

// errorRule is the contract's sentence (impl/store.go) that a call's error
// breaks when the backend does not declare AmbiguousErrors; every check
// that fails a call for its error quotes it, so that a conflict the store
// gave up on under load reads as the broken rule it is, not as bad luck.
const errorRule = "A store that returns such a conflict while the context lives has broken the contract, however often it tried."

// undeclaredError is the failure text for a call that returned err from a
// backend that does not declare AmbiguousErrors.
func undeclaredError(call string, err error) string {
	return fmt.Sprintf("%s failed: %v\n(the backend does not declare Features.AmbiguousErrors, so every call must succeed; impl.Store: %q)", call, err, errorRule)
}

// Capability names an optional store capability in Features.OptOut.
type Capability string

// The optional capabilities.
const (
	CapBlindCursor   Capability = "BlindCursor"   // impl.BlindCursorWriter
	CapLeasedEnqueue Capability = "LeasedEnqueue" // impl.LeasingEnqueuer
	CapHandOff       Capability = "HandOff"       // impl.HandOffWriter
)

// capInterface is the interface each capability is.
var capInterface = map[Capability]string{
	CapBlindCursor:   "impl.BlindCursorWriter",
	CapLeasedEnqueue: "impl.LeasingEnqueuer",
	CapHandOff:       "impl.HandOffWriter",
}

// has reports whether st offers c, as the engine would find it.
func has(st impl.Store, c Capability) bool {
	var ok bool
	switch c {
	case CapBlindCursor:
		_, ok = impl.AsBlindCursorWriter(st)
	case CapLeasedEnqueue:
		_, ok = impl.AsLeasingEnqueuer(st)
	case CapHandOff:
		_, ok = impl.AsHandOffWriter(st)
	}
	return ok
}

// certifies reports whether the suite checks capability c of a store
// that offers it: always, unless the Factory opts out.
func (f Features) certifies(c Capability) bool { return !slices.Contains(f.OptOut, c) }

// optedOut is the skip reason of a check of capability c, or "".
func (f Features) optedOut(c Capability) string {
	if f.certifies(c) {
		return ""
	}
	return fmt.Sprintf("Features.OptOut lists %s: %s is not certified (an engine that finds it still uses it)", c, capInterface[c])
}

// needCapability skips the calling check when st lacks c.
func needCapability(t testing.TB, st impl.Store, c Capability) {
	t.Helper()
	if !has(st, c) {
		t.Skipf("the store does not implement %s (Contract/Capabilities checks that no wrapper hides it)", capInterface[c])
	}
}

// The groups of checks, in the order they run.
const (
	GroupContract        = "Contract"
	GroupStateMachine    = "StateMachine"
	GroupLinearizability = "Linearizability"
)

// Option tunes Run and Check.
type Option func(*settings)

type settings struct {
	only         []string
	rapidChecks  int
	rapidSteps   int
	rapidSeed    uint64
	shrinkTime   time.Duration
	seed         uint64
	seedSet      bool
	clients      int
	opsPerClient int
	hammer       int // messages of the hammer client (HotKeys sets it)
	lzTimeout    time.Duration
	artifacts    string
	// ctx stops the run (Context): a check running when it ends is
	// abandoned, and none starts after it.
	ctx context.Context
	// entry is how the suite was started, so that a failure's replay
	// hint names that entry point's own flags or options.
	entry entryPoint
	// seq names the sequential checks (Contract, StateMachine) that
	// failed so far in this run: a concurrency failure beside them is
	// most likely the same bug, and says so. A pointer: runHot copies the
	// settings.
	seq *seqLog
}

type seqLog struct {
	mu     sync.Mutex
	failed []string
}

func (s *settings) sequentialFailed(name string) {
	s.seq.mu.Lock()
	s.seq.failed = append(s.seq.failed, name)
	s.seq.mu.Unlock()
}

// sequentialNote opens a concurrency failure when sequential checks of the
// same run failed: they call the store one call at a time, so whatever
// they caught is no race, and is the place to start.
func (s *settings) sequentialNote() string {
	s.seq.mu.Lock()
	defer s.seq.mu.Unlock()
	if len(s.seq.failed) == 0 {
		return ""
	}
	return fmt.Sprintf("sequential checks failed too (%s): they call the store one call at a time, so start with them; a race is not the first suspect.\n", strings.Join(s.seq.failed, ", "))
}

// entryPoint is how the caller started the suite.
type entryPoint int

const (
	entryCheck entryPoint = iota // Check or Certify from Go code: options
	entryTest                    // Run under go test: go test's flags
	entryCLI                     // deliverysim certify or Main: CLI's flags
)

// replayRapid says how to replay the state-machine failure of rapid seed
// seed from the entry point the suite was started from (rapid's own text
// says -rapid.seed=N, which neither deliverysim certify nor Main accept).
func (s *settings) replayRapid(testName string, seed uint64) string {
	switch s.entry {
	case entryCLI:
		return fmt.Sprintf("To replay it, run the same command with --only StateMachine/Random --rapid-seed %d", seed)
	case entryTest:
		return fmt.Sprintf("To replay it: go test -run '^%s$' -rapid.seed=%d (or pass conformance.RapidSeed(%d) to Run)", testPattern(testName), seed, seed)
	}
	return fmt.Sprintf("To replay it: conformance.Check(factory, conformance.Only(%q), conformance.RapidSeed(%d))", GroupStateMachine+"/Random", seed)
}

// replaySeed says how to draw a concurrent check's calls again.
func (s *settings) replaySeed() string {
	switch s.entry {
	case entryCLI:
		return fmt.Sprintf("rerun the same command with --seed %d", s.seed)
	case entryTest:
		return fmt.Sprintf("pass conformance.Seed(%d) to Run", s.seed)
	}
	return fmt.Sprintf("pass conformance.Seed(%d) to Check", s.seed)
}

// testPattern turns a subtest's name into the -run pattern that selects
// it: each level anchored, so TestX/StateMachine/Random runs nothing else.
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, "$/^")
}

func newSettings(opts []Option) *settings {
	s := &settings{
		// A fresh seed per run: the clients' calls and pacing differ from
		// run to run, and every report prints the seed that redraws them.
		seed:         rand.Uint64N(1 << 53),
		clients:      4,
		opsPerClient: 100,
		lzTimeout:    30 * time.Second,
		ctx:          context.Background(),
		seq:          &seqLog{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.artifacts == "" {
		// Decided once per run, so every file of it goes to one folder.
		s.artifacts = DefaultArtifactsDir()
	}
	return s
}

// Context stops Check and Certify when ctx is done (a program's SIGINT):
// the check running then is abandoned (reported Interrupted, its stores
// closed and their cleanups run at once, so a pgcert schema is dropped)
// and the checks after it are reported NotRun. Without it a run cannot be
// stopped.
func Context(ctx context.Context) Option { return func(s *settings) { s.ctx = ctx } }

// Only restricts the run to checks whose name ("Contract",
// "Contract/AckDeletes", "StateMachine", "Linearizability/Queue") equals or
// starts with one of names followed by "/".
func Only(names ...string) Option {
	return func(s *settings) { s.only = append(s.only, names...) }
}

// RapidChecks sets how many random op sequences the state machine tries
// (rapid's -rapid.checks, 100 by default). rapid keeps this in a
// process-wide flag; the suite sets it only while its own state machine runs.
func RapidChecks(n int) Option { return func(s *settings) { s.rapidChecks = n } }

// RapidSeed replays one state-machine failure: the seed a failed
// StateMachine check printed (rapid's -rapid.seed).
func RapidSeed(seed uint64) Option { return func(s *settings) { s.rapidSeed = seed } }

// RapidSteps sets the average sequence length (rapid's -rapid.steps, 30).
func RapidSteps(n int) Option { return func(s *settings) { s.rapidSteps = n } }

// ShrinkTime bounds how long rapid minimises a failing sequence
// (-rapid.shrinktime, 30s). Slow backends should lower it in Check.
func ShrinkTime(d time.Duration) Option { return func(s *settings) { s.shrinkTime = d } }

// Seed seeds the linearizability clients' op choices and pacing (default:
// a fresh one per run, printed in the report). Goroutine interleaving is
// up to the scheduler, so a seed fixes the ops, not the history.
func Seed(seed uint64) Option { return func(s *settings) { s.seed, s.seedSet = seed, true } }

// Concurrency sets the linearizability history shape: clients goroutines
// issuing opsPerClient operations each (default 4 x 100).
func Concurrency(clients, opsPerClient int) Option {
	return func(s *settings) { s.clients, s.opsPerClient = clients, opsPerClient }
}

// LinearizabilityTimeout bounds porcupine's search per history (default
// 30s). Running out is reported as a failure to decide, never as a pass.
func LinearizabilityTimeout(d time.Duration) Option {
	return func(s *settings) { s.lzTimeout = d }
}

// ArtifactsDir is where non-linearizable histories are written as HTML
// (default: DefaultArtifactsDir). The folder is created only when a
// failure writes into it.
func ArtifactsDir(dir string) Option { return func(s *settings) { s.artifacts = dir } }

// DefaultArtifactsDir is where a run without ArtifactsDir writes:
// $DELIVERYSIM_ARTIFACTS if set, else a folder of its own under the
// system's temporary folder (deliverysim-certify/<UTC time>-<random>).
// Not the working directory: a certification run from a checkout or a
// home folder left megabytes of HTML there that nobody asked for; and a
// folder per run keeps two runs from overwriting each other's files.
// Every file written is named in the failure that wrote it.
func DefaultArtifactsDir() string {
	if d := os.Getenv("DELIVERYSIM_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "deliverysim-certify",
		fmt.Sprintf("%s-%06x", time.Now().UTC().Format("20060102T150405Z"), rand.Uint32N(1<<24)))
}

func (s *settings) artifactsDir() string { return s.artifacts }

func (s *settings) selected(name string) bool {
	if len(s.only) == 0 {
		return true
	}
	for _, o := range s.only {
		if name == o || strings.HasPrefix(name, o+"/") || strings.HasPrefix(o, name+"/") {
			return true
		}
	}
	return false
}

// check is one named check; every group is a list of these, and Run and
// Check differ only in how they execute the list.
type check struct {
	group, name string
	// rule is the sentence of impl/store.go (or of the optional
	// capability's documentation there) that the check enforces.
	rule string
	// skip returns why the check does not apply to f, or "".
	skip func(f Factory) string
	run  func(t testing.TB, f Factory, s *settings)
}

func (c check) fullName() string { return c.group + "/" + c.name }

func allChecks() []check {
	var cs []check
	cs = append(cs, contractChecks()...)
	cs = append(cs, stateMachineChecks()...)
	cs = append(cs, linearizabilityChecks()...)
	return cs
}

// CheckNames lists what Only accepts: the groups, then every check as
// Group/Check, in run order.
func CheckNames() []string {
	names := []string{GroupContract, GroupStateMachine, GroupLinearizability}
	for _, c := range allChecks() {
		names = append(names, c.fullName())
	}
	return names
}

// ValidateOnly returns an error naming the first of names that is neither
// a group nor a check (see CheckNames), so that a typo in a selection is
// refused instead of selecting nothing.
func ValidateOnly(names []string) error {
	known := map[string]bool{}
	for _, n := range CheckNames() {
		known[n] = true
	}
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("unknown check %q; valid names: %s", n, strings.Join(CheckNames(), ", "))
		}
	}
	return nil
}

func validate(f Factory) error {
	if f.Name == "" || f.New == nil {
		return fmt.Errorf("conformance: Factory needs a Name and a New function (got Name=%q, New set=%v)", f.Name, f.New != nil)
	}
	return nil
}

// Run runs every applicable check against f as subtests of t, named
// Group/Check, so `go test -run 'TestX/Contract/Ack'` selects one. A check
// that does not apply (a feature the backend lacks) is skipped with the
// reason.
func Run(t *testing.T, f Factory, opts ...Option) {
	t.Helper()
	if err := validate(f); err != nil {
		t.Fatal(err)
	}
	s := newSettings(opts)
	s.entry = entryTest
	checks := allChecks()
	for _, group := range []string{GroupContract, GroupStateMachine, GroupLinearizability} {
		if !s.selected(group) {
			continue
		}
		t.Run(group, func(t *testing.T) {
			for _, c := range checks {
				if c.group != group || !s.selected(c.fullName()) {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					if why := c.skip(f); why != "" {
						t.Skip(why)
					}
					// Check's report prints the rule beside a failure;
					// under go test the log does.
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("rule (impl/store.go): %s", c.rule)
						}
					})
					c.run(t, f, s)
					if t.Failed() && c.group != GroupLinearizability {
						s.sequentialFailed(c.fullName())
					}
				})
			}
		})
	}
}

// Status is the outcome of one check.
type Status string

// The outcomes of a check.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
	// Interrupted: the run was stopped (Context) while the check ran; it
	// has no verdict.
	Interrupted Status = "interrupted"
	// NotRun: the run was stopped before the check started.
	NotRun Status = "not_run"
)

// Result is one check's outcome in a Report.
type Result struct {
	Name     string        `json:"name"` // Group/Check
	Group    string        `json:"group"`
	Variant  string        `json:"variant,omitempty"` // Factory.Variant: which configuration of the backend
	Rule     string        `json:"rule"`              // the sentence of impl/store.go the check enforces
	Status   Status        `json:"status"`
	Summary  string        `json:"summary,omitempty"` // one line: why it failed or was skipped, or what a pass covered
	Message  string        `json:"message,omitempty"` // the full story: errors, then logs (for a rapid failure, the minimised op sequence)
	Duration time.Duration `json:"duration_ns"`
}

// Report is what Check returns: one Result per check, in run order.
type Report struct {
	Backend string   `json:"backend"`
	Variant string   `json:"variant,omitempty"`
	Results []Result `json:"results"`
}

// Passed reports whether at least one check ran and none failed. Skips do
// not fail a report, but a report of skips alone (a selection that matched
// nothing, a backend for which nothing applies) certifies nothing.
func (r Report) Passed() bool { return r.Executed() > 0 && len(r.Failures()) == 0 }

// Executed counts the checks that ran (passed or failed).
func (r Report) Executed() int {
	n := 0
	for _, res := range r.Results {
		if res.Status == Pass || res.Status == Fail {
			n++
		}
	}
	return n
}

// Failures returns the failed checks.
func (r Report) Failures() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Status == Fail {
			out = append(out, res)
		}
	}
	return out
}

// Status returns the outcome of the named check, and false if it did not run.
func (r Report) Status(name string) (Status, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res.Status, true
		}
	}
	return "", false
}

// String is a human summary: one line per check, failure details indented.
// It opens with the note that sequential checks failed, when they did
// beside concurrent ones (raceNote).
func (r Report) String() string {
	if note := raceNote(r.Results); note != "" {
		return note + "\n" + r.checks()
	}
	return r.checks()
}

// checks is String without the opening note (a Certificate prints it
// once, above every run).
func (r Report) checks() string {
	var b strings.Builder
	pass, fail, skip, stopped := 0, 0, 0, 0
	for _, res := range r.Results {
		switch res.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		case Interrupted, NotRun:
			stopped++
		}
		if res.Status == NotRun {
			// No duration: it never started.
			fmt.Fprintf(&b, "NOT RUN %s\n", res.Name)
			continue
		}
		fmt.Fprintf(&b, "%-4s %s (%v)\n", strings.ToUpper(string(res.Status)), res.Name, res.Duration.Round(time.Millisecond))
		if res.Status == Interrupted {
			fmt.Fprintf(&b, "     %s\n", res.Summary)
		}
		if res.Status == Fail {
			fmt.Fprintf(&b, "     %s\n", res.Summary)
			fmt.Fprintf(&b, "     rule (impl/store.go): %s\n", res.Rule)
			for _, line := range strings.Split(strings.TrimRight(res.Message, "\n"), "\n") {
				fmt.Fprintf(&b, "     %s\n", line)
			}
		}
	}
	name := r.Backend
	if r.Variant != "" {
		name += " (" + r.Variant + ")"
	}
	fmt.Fprintf(&b, "%s: %d passed, %d failed, %d skipped", name, pass, fail, skip)
	if stopped > 0 {
		fmt.Fprintf(&b, ", %d interrupted or not run", stopped)
	}
	b.WriteString("\n")
	return b.String()
}

// JSON is the machine-readable report (for CI and `deliverysim --json`).
func (r Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// Check runs the same checks as Run without a *testing.T and returns the
// outcome instead of failing anybody: this is how CLIs certify a backend and
// how the suite proves it catches buggy ones. Each check runs on its own
// goroutine with a recording testing.TB; a fatal failure ends only that
// check. rapid writes no fail files here (it would litter the caller's
// testdata); failures carry the RapidSeed that replays them.
func Check(f Factory, opts ...Option) Report {
	rep := Report{Backend: f.Name, Variant: f.Variant}
	if err := validate(f); err != nil {
		rep.Results = append(rep.Results, Result{Name: "Factory", Group: "Factory", Status: Fail, Message: err.Error()})
		return rep
	}
	s := newSettings(opts)
	for _, c := range allChecks() {
		if !s.selected(c.fullName()) {
			continue
		}
		res := Result{Name: c.fullName(), Group: c.group, Variant: f.Variant, Rule: c.rule}
		if why := c.skip(f); why != "" {
			res.Status, res.Message, res.Summary = Skip, why, why
			rep.Results = append(rep.Results, res)
			continue
		}
		if s.ctx.Err() != nil {
			res.Status, res.Summary = NotRun, "not run: the certification was stopped before this check started"
			rep.Results = append(rep.Results, res)
			continue
		}
		start := time.Now()
		rec, finished := runRecorded(s.ctx, c.fullName(), func(t testing.TB) { c.run(t, stoppable(f, s.ctx), s) })
		res.Duration = time.Since(start)
		if !finished {
			// What it recorded so far may be the stop's own doing (a
			// closed store's errors): no verdict either way.
			res.Status = Interrupted
			res.Summary = fmt.Sprintf("interrupted after %v: the certification was stopped while this check ran; no verdict", res.Duration.Round(time.Millisecond))
			rep.Results = append(rep.Results, res)
			continue
		}
		res.Status, res.Message = rec.outcome()
		res.Summary = summarize(res.Status, res.Message)
		if res.Status == Fail && c.group != GroupLinearizability {
			s.sequentialFailed(c.fullName())
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

// stoppable is f whose New refuses to open a store once ctx is done: an
// abandoned check that goes on (rapid's shrinking, the next history)
// must not make what nobody is left to drop.
func stoppable(f Factory, ctx context.Context) Factory {
	if ctx.Done() == nil {
		return f
	}
	open := f.New
	f.New = func(t testing.TB) impl.Store {
		if ctx.Err() != nil {
			t.Skip("the certification was stopped")
		}
		return open(t)
	}
	return f
}

// summarize picks the line that says what happened: for a pass, the last
// log line (rapid's and porcupine's tallies); for a failure, testify's
// "Messages:" and "Error:" fields when present (its output starts with a
// stack trace), else the first non-empty line.
func summarize(status Status, msg string) string {
	if status == Pass {
		lines := strings.Split(strings.TrimSpace(msg), "\n")
		last := strings.TrimSpace(lines[len(lines)-1])
		// The state machine's reach line follows rapid's tally: keep both.
		if strings.HasPrefix(last, reachPrefix) && len(lines) > 1 {
			return strings.TrimSpace(lines[len(lines)-2]) + "; " + last
		}
		return last
	}
	var errLine, msgLine string
	for _, line := range strings.Split(msg, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case errLine == "" && strings.HasPrefix(trimmed, "Error:"):
			errLine = strings.TrimSpace(strings.TrimPrefix(trimmed, "Error:"))
		case msgLine == "" && strings.HasPrefix(trimmed, "Messages:"):
			msgLine = strings.TrimSpace(strings.TrimPrefix(trimmed, "Messages:"))
		}
	}
	switch {
	case msgLine != "" && errLine != "":
		return msgLine + ": " + errLine
	case errLine != "":
		return errLine
	}
	for _, line := range strings.Split(msg, "\n") {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}

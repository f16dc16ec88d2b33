package faults

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Forever is an Until that never comes: a fault window that outlives the
// run (a poison message, a bot that never recovers).
const Forever = time.Duration(math.MaxInt64)

// Fault is one fault at one place: which node, bot, stream or store call,
// and when. It is the unit of a schedule, of a run's record of what it
// injected (the minimizer's input), and of a scenario file's faults. Times
// are offsets from the start of the run. It names targets by their names
// only, so a harness of real processes can execute the same value.
//
// What each kind reads (the other fields must be zero; Validate says so
// for the ones a file could get wrong):
//
//	crash                        Node crashes right after its first step at or after At
//	                             (only a step of input kind After, if set; at exactly
//	                             At, only from its Call-th step of that instant);
//	                             it reboots RestartAfter later (0: 1s)
//	crash-after-*                Node crashes at the named crash point, its first visit
//	                             at or after At; reboots RestartAfter later
//	webhook-5xx/timeout/slow     requests to Bot (only for Event, and only attempt
//	                             Attempt, when set) fail that way: every one in
//	                             [At, Until), or with Until 0 the first one at or
//	                             after At. 5xx: Status (0: 500). slow: the bot
//	                             processes it Delay after the timeout
//	webhook-refused              Bot refuses every request in [At, Until) (Until 0:
//	                             the first one at or after At)
//	webhook-duplicate            requests to Bot (Event, Attempt filters as above)
//	                             arrive twice, the copy Delay later
//	upstream-duplicate           the first batch of Stream (to Node, if set) at or
//	                             after At is delivered again Delay later
//	upstream-reorder             the first batch of two or more events of Stream (to
//	                             Node, if set) at or after At is permuted: event i
//	                             moves to Order[i] (no Order, or a bad one: reversed)
//	clock-offset / clock-drift   Node's clock is off by Offset / gains PPM parts per
//	                             million, from boot number Incarnation (0: every boot)
//	store-error/store-ambiguous  Node's store calls of Method (no Method: every
//	                             call, a database outage or a cut connection) fail:
//	                             every one in [At, Until), or with Until 0 the first
//	                             at or after At
//	membership-churn             at At, Bot joins (Member) or leaves Stream, for
//	                             events after the stream's head at that moment; a
//	                             join with Back > 0 starts behind the head instead
//	                             (a backfilling join): from the position that leaves
//	                             Back events of the stream after it (all of them if
//	                             it has no more)
//	late-key                     Bot starts without its key and publishes it at At
//	                             (Never: not at all)
//	webhook-hang, result-lost    requests to Bot (Event, Attempt filters as above):
//	                             every one in [At, Until), or with Until 0 the first
//	                             one at or after At, never has its outcome told to
//	                             the engine (hang: the bot never processes it; lost:
//	                             it does, and its answer is lost)
//	webhook-4xx                  requests to Bot (Event, Attempt filters as above):
//	                             every one in [At, Until) (Until Forever: for
//	                             good), or with Until 0 the first one at or after
//	                             At, is answered Status (a 4xx; 0: 404) unprocessed
//	webhook-late                 requests to Bot (Event, Attempt filters as above):
//	                             every one in [At, Until), or with Until 0 the first
//	                             one at or after At, hangs until the engine's expiry
//	                             bound (Lease + CleanupInterval by its node's clock)
//	                             has passed, plus Delay; then the bot processes it
//	                             and answers, and the node is handed that answer
//	                             (which it must ignore)
type Fault struct {
	Kind         Kind          `json:"kind"`
	At           time.Duration `json:"at_ns"`
	Until        time.Duration `json:"until_ns,omitempty"`
	Node         string        `json:"node,omitempty"`
	Bot          string        `json:"bot,omitempty"`
	Stream       string        `json:"stream,omitempty"`
	Event        string        `json:"event,omitempty"`
	Attempt      int           `json:"attempt,omitempty"`
	After        string        `json:"after,omitempty"`
	Method       string        `json:"method,omitempty"` // store faults: "" = every call
	RestartAfter time.Duration `json:"restart_after_ns,omitempty"`
	Offset       time.Duration `json:"offset_ns,omitempty"`
	PPM          int64         `json:"ppm,omitempty"`
	Incarnation  int           `json:"incarnation,omitempty"`
	Delay        time.Duration `json:"delay_ns,omitempty"`
	Status       int           `json:"status,omitempty"`
	Order        []int         `json:"order,omitempty"`
	Member       bool          `json:"member,omitempty"`
	Back         int           `json:"back,omitempty"` // membership-churn joins: events behind the head
	Never        bool          `json:"never,omitempty"`
	// Call picks, among the node's steps, visits of the crash point, or
	// calls of Method that happen at exactly At, the Call-th (0-based).
	Call int `json:"call,omitempty"`
}

func (f Fault) String() string {
	s := string(f.Kind) + " at " + f.At.String()
	for _, kv := range [][2]string{{"node", f.Node}, {"bot", f.Bot}, {"stream", f.Stream}, {"event", f.Event}, {"method", f.Method}} {
		if kv[1] != "" {
			s += " " + kv[0] + "=" + kv[1]
		}
	}
	return s
}

// StoreMethods are the impl.Store calls a store fault may name.
var StoreMethods = []string{
	"GetCursor", "ListCursors", "AdvanceCursors", "PutCursorBlind", "Enqueue", "EnqueueLeased", "Claim", "Ack", "Fail",
	"Requeue", "ListMessages", "DeleteExpired", "TrimPerSubscriber", "GetDelivered", "RecordDelivered", "MarkProcessed",
	"WriteHandOff", // new methods go last
}

// ReadMethods fail only before the call (an ambiguous outcome needs a write).
var ReadMethods = []string{"GetCursor", "ListCursors", "ListMessages", "GetDelivered"}

// Targets returns which of the fault's name fields its kind needs ("node",
// "bot", "stream") and which it may name optionally, so a schedule can be
// checked against a world without this package knowing the world.
func (f Fault) Targets() (need, optional []string) {
	switch TargetOf(f.Kind) {
	case OnNode:
		return []string{"node"}, nil
	case OnBot:
		return []string{"bot"}, nil
	case OnStream:
		return []string{"stream"}, []string{"node"}
	}
	if f.Kind == MembershipChurn {
		return []string{"stream", "bot"}, nil
	}
	return nil, nil
}

// Validate checks the fault on its own: a known kind, a sane window, and
// parameters in range and meaningful for the kind. Whether the names it
// uses exist is the caller's business (see Targets).
func (f Fault) Validate() error {
	if !f.Kind.Valid() {
		return fmt.Errorf("unknown kind")
	}
	if f.At < 0 || (f.Until != 0 && f.Until < f.At) {
		return fmt.Errorf("needs 0 <= at <= until (at %v, until %v)", f.At, f.Until)
	}
	if f.Incarnation < 0 {
		return fmt.Errorf("incarnation %d is negative", f.Incarnation)
	}
	if f.Back < 0 || (f.Back > 0 && (f.Kind != MembershipChurn || !f.Member)) {
		return fmt.Errorf("back %d: only a membership-churn join starts behind the head, by a count >= 0", f.Back)
	}
	if f.Offset < -MaxClockOffset || f.Offset > MaxClockOffset {
		return fmt.Errorf("offset %v is outside [-%v, %v]", f.Offset, MaxClockOffset, MaxClockOffset)
	}
	if f.PPM < -MaxClockDriftPPM || f.PPM > MaxClockDriftPPM {
		return fmt.Errorf("drift of %d ppm is outside [-%d, %d] (a gain or loss of at most %v per hour)",
			f.PPM, MaxClockDriftPPM, MaxClockDriftPPM, MaxClockDrift)
	}
	switch f.Kind {
	case Webhook5xx:
		if f.Status != 0 && (f.Status < 500 || f.Status > 599) {
			return fmt.Errorf("status %d is not a 5xx", f.Status)
		}
	case Webhook4xx:
		if f.Status != 0 && (f.Status < 400 || f.Status > 499) {
			return fmt.Errorf("status %d is not a 4xx", f.Status)
		}
	case StoreError, StoreAmbiguous:
		if f.Method != "" && !slices.Contains(StoreMethods, f.Method) {
			return fmt.Errorf("method %q is not a store call (one of %v, or none for every call)", f.Method, StoreMethods)
		}
		if f.Kind == StoreAmbiguous && slices.Contains(ReadMethods, f.Method) {
			return fmt.Errorf("%s is a read; only writes can have an ambiguous outcome", f.Method)
		}
	}
	return nil
}

// Site is one place where a fault may fire: a step or crash point of a
// node, a request to a bot, a batch of a stream, a store call. Ord numbers
// the site among its like at the same instant (see Fault.Call); NoOrd
// means the site has no such number and every Call matches.
type Site struct {
	Kind    Kind
	At      time.Duration // since the start of the run
	Ord     int
	Node    string
	Bot     string
	Stream  string
	Event   string
	Attempt int
	After   string // crash: the input kind of the step
	Method  string
	// Incarnation is the boot number of a clock site.
	Incarnation int
}

// NoOrd is the Ord of a site that is not numbered.
const NoOrd = math.MaxInt

// Matches reports whether f applies at s, windows aside (a Book keeps
// those): same kind, same targets (with the kind's optional filters), and
// reached (its instant has passed, or it is now and this is the Call-th
// site of the instant or a later one).
func (f Fault) Matches(s Site) bool {
	if f.Kind != s.Kind || !(s.At > f.At || s.Ord >= f.Call) {
		return false
	}
	// Kinds with filters beyond their target.
	switch f.Kind {
	case Crash:
		return f.Node == s.Node && (f.After == "" || f.After == s.After)
	case WebhookTimeout, Webhook5xx, WebhookRefused, WebhookSlow, WebhookDuplicate, WebhookHang, ResultLost, Webhook4xx, WebhookLate:
		// A snapshot change's id ends in "#instance"; a fault may name the
		// change without it.
		return f.Bot == s.Bot && (f.Event == "" || f.Event == s.Event || strings.HasPrefix(s.Event, f.Event+"#")) &&
			(f.Attempt == 0 || f.Attempt == s.Attempt)
	case StoreError, StoreAmbiguous:
		// No method: every call (a database outage, or every connection cut).
		return f.Node == s.Node && (f.Method == "" || f.Method == s.Method)
	case ClockOffset, ClockDrift:
		return f.Node == s.Node && (f.Incarnation == 0 || f.Incarnation == s.Incarnation)
	case MembershipChurn:
		return f.Stream == s.Stream && f.Bot == s.Bot
	}
	switch TargetOf(f.Kind) {
	case OnNode:
		return f.Node == s.Node
	case OnBot:
		return f.Bot == s.Bot
	case OnStream:
		return f.Stream == s.Stream && (f.Node == "" || f.Node == s.Node)
	}
	return false
}

// Book is a schedule being executed: it remembers which one-shot faults
// (Until 0) already fired. Entries are tried in order.
type Book struct {
	faults []Fault
	used   []bool
	hit    []bool // matched at least once (one-shot or windowed)
}

// NewBook starts executing fs (not copied; do not change it meanwhile).
func NewBook(fs []Fault) *Book {
	return &Book{faults: fs, used: make([]bool, len(fs)), hit: make([]bool, len(fs))}
}

// Unfired returns the entries aimed at a site (a call, a send, a crash
// point: not the clock, churn and key entries the simulator applies by
// time) that never matched one, in schedule order: a schedule that builds
// a situation the run never reached.
func (b *Book) Unfired() []Fault {
	if b == nil {
		return nil
	}
	var out []Fault
	for i, f := range b.faults {
		switch f.Kind {
		case ClockOffset, ClockDrift, MembershipChurn, LateKey:
			continue // the simulator applies these by time, not at a site
		}
		if !b.hit[i] {
			out = append(out, f)
		}
	}
	return out
}

// Faults returns the schedule.
func (b *Book) Faults() []Fault {
	if b == nil {
		return nil
	}
	return b.faults
}

// open reports whether entry i is open at t: inside [At, Until), or, for a
// one-shot fault, at or after At and not fired yet.
func (b *Book) open(i int, t time.Duration) bool {
	f := b.faults[i]
	if t < f.At {
		return false
	}
	if f.Until == 0 {
		return !b.used[i]
	}
	return t < f.Until
}

// Take returns the first open fault that matches s and marks a one-shot
// fault as fired.
func (b *Book) Take(s Site) (Fault, bool) {
	if b == nil {
		return Fault{}, false
	}
	for i, f := range b.faults {
		if b.open(i, s.At) && f.Matches(s) {
			b.hit[i] = true
			if f.Until == 0 {
				b.used[i] = true
			}
			return f, true
		}
	}
	return Fault{}, false
}

// Has reports whether any entry satisfies pred (for setup decisions).
func (b *Book) Has(pred func(Fault) bool) bool {
	return b != nil && slices.ContainsFunc(b.faults, pred)
}

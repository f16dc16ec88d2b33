package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
)

// Forever is an Until that never comes: a fault window that outlives the
// run (a poison message, a bot that never recovers).
const Forever = time.Duration(math.MaxInt64)

// Fault is one explicitly scheduled fault. Where a random plan says "how
// often", a schedule says exactly where: which node, bot, stream or store
// call, and when. Times are offsets from Epoch. The heal does not end
// scheduled faults: their own windows do.
//
// What each kind reads (the others fields are ignored):
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
//	store-error/store-ambiguous  Node's store calls of Method fail: every one in
//	                             [At, Until), or with Until 0 the first at or after At
//	membership-churn             at At, Bot joins (Member) or leaves Stream, for
//	                             events after the stream's head at that moment
//	late-key                     Bot starts without its key and publishes it at At
//	                             (Never: not at all)
type Fault struct {
	Kind         faults.Kind
	At, Until    time.Duration
	Node         string
	Bot          string
	Stream       string
	Event        string
	Attempt      int
	After        string
	Method       string
	RestartAfter time.Duration
	Offset       time.Duration
	PPM          int64
	Incarnation  int
	Delay        time.Duration
	Status       int
	Order        []int
	Member       bool
	Never        bool
	// Call picks, among the node's steps, visits of the crash point, or
	// calls of Method that happen at exactly At, the Call-th (0-based).
	Call int
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

// storeMethods are the impl.Store calls a scheduled store fault may name.
var storeMethods = []string{
	"GetCursor", "ListCursors", "AdvanceCursors", "PutCursorBlind", "Enqueue", "EnqueueLeased", "Claim", "Ack", "Fail",
	"Requeue", "ListMessages", "DeleteExpired", "TrimPerSubscriber", "GetDelivered", "RecordDelivered", "MarkProcessed",
}

// readMethods fail only before the call (an ambiguous outcome needs a write).
var readMethods = []string{"GetCursor", "ListCursors", "ListMessages", "GetDelivered"}

// ValidateSchedule checks that every fault names things the workload has.
func ValidateSchedule(w Workload, sched []Fault) error {
	nodes, bots, streams := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := 0; i < w.Nodes; i++ {
		nodes[fmt.Sprintf("node-%d", i+1)] = true
	}
	for _, b := range w.Bots {
		bots[b.ID] = true
	}
	for _, s := range w.Streams {
		streams[s.Name] = true
	}
	for i, f := range sched {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("fault schedule entry %d (%s): %s", i+1, f.Kind, fmt.Sprintf(format, args...))
		}
		if !f.Kind.Valid() {
			return bad("unknown kind")
		}
		if f.At < 0 || (f.Until != 0 && f.Until < f.At) {
			return bad("needs 0 <= at <= until (at %v, until %v)", f.At, f.Until)
		}
		needNode := func() error {
			if !nodes[f.Node] {
				return bad("node %q is not one of node-1..node-%d", f.Node, w.Nodes)
			}
			return nil
		}
		needBot := func() error {
			if !bots[f.Bot] {
				return bad("bot %q is not in the workload", f.Bot)
			}
			return nil
		}
		needStream := func() error {
			if !streams[f.Stream] {
				return bad("stream %q is not in the workload", f.Stream)
			}
			return nil
		}
		var err error
		switch f.Kind {
		case faults.Crash, faults.CrashAfterStoreWrite, faults.CrashAfterSend, faults.CrashAfterProcess,
			faults.ClockOffset, faults.ClockDrift:
			err = needNode()
			if err == nil && f.Incarnation < 0 {
				err = bad("incarnation %d is negative", f.Incarnation)
			}
			if err == nil && (f.Offset < -faults.MaxClockOffset || f.Offset > faults.MaxClockOffset) {
				err = bad("offset %v is outside [-%v, %v]", f.Offset, faults.MaxClockOffset, faults.MaxClockOffset)
			}
			if err == nil && (f.PPM < -faults.MaxClockDriftPPM || f.PPM > faults.MaxClockDriftPPM) {
				err = bad("drift of %d ppm is outside [-%d, %d] (a gain or loss of at most %v per hour)",
					f.PPM, faults.MaxClockDriftPPM, faults.MaxClockDriftPPM, faults.MaxClockDrift)
			}
		case faults.WebhookTimeout, faults.Webhook5xx, faults.WebhookRefused, faults.WebhookSlow, faults.WebhookDuplicate, faults.LateKey:
			err = needBot()
			if err == nil && f.Kind == faults.Webhook5xx && f.Status != 0 && (f.Status < 500 || f.Status > 599) {
				err = bad("status %d is not a 5xx", f.Status)
			}
		case faults.UpstreamDuplicate, faults.UpstreamReorder:
			err = needStream()
			if err == nil && f.Node != "" {
				err = needNode()
			}
		case faults.StoreError, faults.StoreAmbiguous:
			if err = needNode(); err == nil && !slices.Contains(storeMethods, f.Method) {
				err = bad("method %q is not a store call (one of %v)", f.Method, storeMethods)
			}
			if err == nil && f.Kind == faults.StoreAmbiguous && slices.Contains(readMethods, f.Method) {
				err = bad("%s is a read; only writes can have an ambiguous outcome", f.Method)
			}
		case faults.MembershipChurn:
			if err = needStream(); err == nil {
				err = needBot()
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// schedState tracks which one-shot scheduled faults already fired.
type schedState struct {
	faults []Fault
	used   []bool
}

func newSchedState(fs []Fault) *schedState {
	return &schedState{faults: fs, used: make([]bool, len(fs))}
}

// window reports whether f is open at t: inside [At, Until), or, for a
// one-shot fault, at or after At and not fired yet.
func (ss *schedState) open(i int, t time.Duration) bool {
	f := ss.faults[i]
	if t < f.At {
		return false
	}
	if f.Until == 0 {
		return !ss.used[i]
	}
	return t < f.Until
}

// take returns the first open fault matching pred and marks a one-shot
// fault as fired.
func (ss *schedState) take(t time.Duration, pred func(Fault) bool) (Fault, bool) {
	if ss == nil {
		return Fault{}, false
	}
	for i, f := range ss.faults {
		if ss.open(i, t) && pred(f) {
			if f.Until == 0 {
				ss.used[i] = true
			}
			return f, true
		}
	}
	return Fault{}, false
}

// elapsed is the virtual time since Epoch.
func (s *sim) elapsed() time.Duration { return s.now.Sub(Epoch) }

func (s *sim) schedTake(pred func(Fault) bool) (Fault, bool) {
	return s.sched.take(s.elapsed(), pred)
}

// schedHas reports whether any scheduled fault matches pred (for setup).
func (s *sim) schedHas(pred func(Fault) bool) bool {
	return slices.ContainsFunc(s.sched.faults, pred)
}

func isWebhookFailure(k faults.Kind) bool { return slices.Contains(failureKinds, k) }

// matchRequest is the Bot/Event/Attempt filter of webhook faults.
func matchRequest(f Fault, bot, event string, attempt int) bool {
	// A snapshot change's id ends in "#instance" (engine.SnapshotEventID); a
	// schedule may name the change without it.
	return f.Bot == bot && (f.Event == "" || f.Event == event || strings.HasPrefix(event, f.Event+"#")) && (f.Attempt == 0 || f.Attempt == attempt)
}

// permute applies a scheduled reorder: element i goes to order[i]. A
// missing or malformed order reverses the batch.
func permute[T any](xs []T, order []int) []T {
	out := make([]T, len(xs))
	ok := len(order) == len(xs)
	seen := make([]bool, len(xs))
	for _, o := range order {
		if !ok || o < 0 || o >= len(xs) || seen[o] {
			ok = false
			break
		}
		seen[o] = true
	}
	for i, x := range xs {
		if ok {
			out[order[i]] = x
		} else {
			out[len(xs)-1-i] = x
		}
	}
	return out
}

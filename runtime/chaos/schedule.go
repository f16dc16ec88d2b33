package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/faults"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// EngineNode is the node name of the one engine process in the chaos
// schedule's faults.
const EngineNode = "engine"

// The schedule is a list of faults.Fault, the value the simulator's
// schedules, scenario files and minimizer use, executed here in real time:
//
//	crash            SIGKILL the engine at At; start it again RestartAfter later
//	store-ambiguous  (no method) cut every database connection at At: what
//	                 was in flight may or may not have committed
//	store-error      (no method) stall every database connection in
//	                 [At, Until): calls fail by their timeout
//	webhook-5xx, webhook-refused, webhook-timeout, webhook-slow,
//	webhook-duplicate
//	                 Bot answers that way in [At, Until) (timeout: it runs
//	                 the handler, then answers after the engine gave up)
//
// Any other kind is one the real harness cannot produce (Executable says
// which). Among them webhook-hang, result-lost and webhook-late: the engine process
// under test is a real runtime whose HTTP client has a timeout, so a bot
// server that never answers (or a connection the proxy stalls) ends as a
// timeout the runtime reports, and no fault from outside the process can
// make its runtime drop an outcome it received. Losing outcomes needs a
// runtime that loses them, which only the simulator has.

// Kinds are the fault kinds the harness carries out (chaos --faults).
func Kinds() []faults.Kind {
	return []faults.Kind{faults.Crash, faults.StoreAmbiguous, faults.StoreError, faults.Webhook5xx,
		faults.WebhookRefused, faults.WebhookTimeout, faults.WebhookSlow, faults.WebhookDuplicate}
}

// Executable reports whether the chaos harness can carry out f.
func Executable(f faults.Fault) error {
	switch f.Kind {
	case faults.Crash:
		if f.Node != EngineNode {
			return fmt.Errorf("%s: the chaos engine is node %q", f, EngineNode)
		}
	case faults.StoreAmbiguous, faults.StoreError:
		if f.Method != "" {
			return fmt.Errorf("%s: the chaos harness cuts or stalls connections, not one store method", f)
		}
		if f.Kind == faults.StoreError && f.Until <= f.At {
			return fmt.Errorf("%s: a stall needs a window (until after at)", f)
		}
	default:
		if _, ok := botModes[f.Kind]; !ok {
			return fmt.Errorf("%s: the chaos harness cannot produce %s", f, f.Kind)
		}
		if f.Bot == "" || f.Until <= f.At {
			return fmt.Errorf("%s: a bot fault needs a bot and a window", f)
		}
	}
	return f.Validate()
}

// describe is one line of the printed schedule.
func describe(f faults.Fault) string {
	s := fmt.Sprintf("%8.3fs %-17s", f.At.Seconds(), f.Kind)
	switch {
	case f.Kind == faults.Crash:
		if f.After != "" {
			s += fmt.Sprintf(" at store write %d after the next %s (or %s after it; armed here)", f.Call, f.After, f.Delay.Round(time.Millisecond))
		}
		s += fmt.Sprintf(" restart after %s", f.RestartAfter.Round(time.Millisecond))
	case f.Kind == faults.StoreAmbiguous:
		s += " cut every database connection"
	case f.Kind == faults.StoreError:
		s += fmt.Sprintf(" stall the database for %s", (f.Until - f.At).Round(time.Millisecond))
	default:
		s += fmt.Sprintf(" %s for %s", f.Bot, (f.Until - f.At).Round(time.Millisecond))
	}
	return s
}

// Plan draws the fault schedule of a run from c's seed and fault counts:
// kills spread over the fault phase (planKills), database cuts and stalls,
// bot faults on every bot but the first (which stays healthy, so isolation
// has a witness), and c's long outage if it asks for one. The same Config
// gives the same plan.
func Plan(c Config, bots []string) []faults.Fault {
	duration, dbCuts, botFaults := c.Duration, c.DBCuts, c.BotFaults
	rng := rand.New(rand.NewPCG(c.Seed, 0xc4a05))
	span := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	out, downAt, down := planKills(c, span)
	// The database and bot faults are drawn over the fault phase without
	// the long downtime (and a second after it to start again), then put
	// around it: a fault on an engine that is down tests nothing.
	if down > 0 {
		down += time.Second
	}
	live := duration - down
	around := func(at time.Duration) time.Duration {
		if down > 0 && at >= downAt {
			return at + down
		}
		return at
	}
	for i := range dbCuts {
		slot := live / time.Duration(dbCuts)
		at := around(time.Duration(i)*slot + span(0, slot))
		f := faults.Fault{Kind: faults.StoreAmbiguous, At: at, Node: EngineNode}
		if rng.IntN(3) == 0 {
			f.Kind, f.Until = faults.StoreError, at+span(500*time.Millisecond, 3*time.Second)
		}
		out = append(out, f)
	}
	if len(bots) > 1 {
		kinds := []faults.Kind{faults.Webhook5xx, faults.WebhookRefused, faults.WebhookTimeout, faults.WebhookSlow, faults.WebhookDuplicate}
		// The kinds take turns from a drawn first one, so that a run with
		// five or more bot faults has a window of each (coverage).
		first := rng.IntN(len(kinds))
		for i := range botFaults {
			at := around(span(0, live*9/10))
			k := kinds[(first+i)%len(kinds)]
			bot := bots[1+rng.IntN(len(bots)-1)]
			if bot == "bot-2" && at < registryChanges(duration).join && len(bots) > 2 {
				// bot-2 is owed nothing before it joins: a window there
				// would test nothing.
				bot = "bot-1"
			}
			out = append(out, faults.Fault{Kind: k, At: at, Bot: bot, Until: at + span(500*time.Millisecond, 4*time.Second)})
		}
	}
	if c.Outage > 0 {
		at := duration / 3
		out = append(out, faults.Fault{Kind: faults.StoreError, At: at, Until: at + c.Outage, Node: EngineNode})
	}
	// One long bot outage, drawn last so the draws above stay what they
	// were for a seed: 5xx for longer than the declared retry schedule, so
	// messages reach max attempts and must be dead-lettered, not retried
	// for ever. Only where the fault phase holds it (longOutageStart).
	if lo, hi, ok := longOutageStart(c); len(bots) > 1 && ok {
		at := span(lo, hi)
		out = append(out, faults.Fault{Kind: faults.Webhook5xx, At: at, Bot: bots[len(bots)-1], Until: at + longOutage(c.Engine)})
	}
	if len(c.Faults) > 0 {
		out = slices.DeleteFunc(out, func(f faults.Fault) bool { return !slices.Contains(c.Faults, f.Kind) })
	}
	slices.SortStableFunc(out, func(a, b faults.Fault) int {
		if a.At != b.At {
			if a.At < b.At {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Kind), string(b.Kind))
	})
	return out
}

// longOutage is how long a bot must fail for a message sent at its start
// to use up the declared attempts: every backoff of the schedule, every
// attempt timing out, and a breaker open period before each attempt (an
// open breaker lets one probe through per period), plus 2 s. Zero when no
// attempt limit is declared.
func longOutage(e engine.Config) time.Duration {
	if e.MaxAttempts <= 0 {
		return 0
	}
	total, b := 2*time.Second, float64(e.InitialBackoff)
	for i := 0; i < e.MaxAttempts; i++ {
		total += e.WebhookTimeout + e.BreakerOpenFor
		if i < e.MaxAttempts-1 {
			total += min(time.Duration(b), e.MaxBackoff)
			b = min(b*max(e.Multiplier, 1), float64(e.MaxBackoff))
		}
	}
	return total
}

// keyClear is how long after the last bot's key is published its long
// outage may start at the earliest: time for the engine to apply the key
// and hand the bot its held backlog, a restart included (a kill may be
// aimed at the publication).
const keyClear = 5 * time.Second

// longOutageStart is where the last bot's long outage may start: a tenth
// into the fault phase at the earliest, and keyClear after that bot's key
// is published (a window over the publication sends every held message
// into it, so all are dead-lettered and none is handled: a 60 s run once
// never reached registry/held-for-a-key-then-handled), and late enough to
// end a tenth before the fault phase does. ok is false when no start fits
// (a phase shorter than about 36 s at the reference settings) or no
// attempt limit is declared.
func longOutageStart(c Config) (lo, hi time.Duration, ok bool) {
	l := longOutage(c.Engine)
	if l <= 0 {
		return 0, 0, false
	}
	d := c.Duration
	lo = max(d/10, registryChanges(d).key+keyClear)
	hi = d*9/10 - l
	return lo, hi, hi >= lo
}

func longOutageFits(c Config) bool {
	_, _, ok := longOutageStart(c)
	return ok && c.Bots > 1
}

// Kill aims (faults.Fault.After of a crash): the protocol moment a kill
// waits for once armed at its At, then comes Delay after. A crash with no
// After comes at its At (a random instant).
const (
	// aimUpstream: an upstream answer with events was served to the engine
	// (catches a cursor made durable before its hand-offs are).
	aimUpstream = "upstream-answer"
	// aimOK: a bot answered the engine 2xx (the delivery is not yet
	// recorded: the kill window excuses the re-send).
	aimOK = "webhook-2xx"
	// aimRegistry: the registry changed, and the engine may not have
	// applied the change yet (a join's backfill, a rotation, a move).
	aimRegistry = "registry-change"
)

// aims are the kill aims in the order the aimed kills cycle through them:
// an upstream answer every other time, as a hand-off's window (a cursor
// made durable before its deliveries) is the shortest and the costliest
// to miss; 60 s with 10 kills aims four there, two at registry changes
// and one at a 2xx.
var aims = []string{aimUpstream, aimRegistry, aimUpstream, aimOK}

// aimPatience: an armed kill whose moment does not come within this long
// comes anyway (a random instant; coverage does not count it as aimed).
const aimPatience = 3 * time.Second

// longDowntime is how long one kill of a run keeps the engine down: well
// beyond the timestamp lookback and the lease, so a restart finds a
// durable cursor older than both (catches an engine that resumes from the
// head, or skips the lookback, when its cursor is old).
func longDowntime(e engine.Config) time.Duration {
	return max(e.TimestampLookback, e.Lease) + 3*time.Second
}

// longDowntimeFits: the long downtime takes at most 2/5 of the fault phase
// (a 20 s run holds the reference's 8 s; an engine declaring a 10 m
// lookback gets none in a short run, and coverage says so).
func longDowntimeFits(c Config) bool {
	return c.Kills > 0 && longDowntime(c.Engine) <= c.Duration*2/5
}

// planKills draws c.Kills kills: one slot of the fault phase each, at a
// random point in it, restarting within a second; when it fits one of
// them keeps the engine down for longDowntime (the slots are laid out
// around that downtime, so no kill falls inside it; it returns where the
// downtime starts and its length). Three kills in four (all but the first of
// every four) are aimed at a protocol moment, cycling through aims:
// a registry-change kill is armed 150 ms before one of the registry
// changes (registryChanges), the others at their slot's point.
func planKills(c Config, span func(lo, hi time.Duration) time.Duration) (out []faults.Fault, downAt, down time.Duration) {
	kills := c.Kills
	if kills <= 0 {
		return nil, 0, 0
	}
	long, down := -1, time.Duration(0)
	if longDowntimeFits(c) {
		// One of the kills that are not aimed (every fourth), so the long
		// downtime takes no aim away: 4 kills hold all three aims.
		long, down = 4*int(span(0, time.Duration((kills+3)/4))), longDowntime(c.Engine)
	}
	slot := (c.Duration - down) / time.Duration(kills)
	out = make([]faults.Fault, kills)
	for i := range out {
		at := time.Duration(i)*slot + span(slot/10, slot*9/10)
		if long >= 0 && i > long {
			at += down // after the long downtime
		}
		out[i] = faults.Fault{Kind: faults.Crash, At: at, Node: EngineNode, RestartAfter: span(100*time.Millisecond, 800*time.Millisecond)}
	}
	if long >= 0 {
		out[long].RestartAfter, downAt = down, out[long].At
	}
	changes := registryChanges(c.Duration).all()
	used := map[int]bool{}
	aimed := 0
	for i := range out {
		f := &out[i]
		if i == long || i%4 == 0 {
			continue
		}
		f.After = aims[aimed%len(aims)]
		aimed++
		// At the Call-th store write after the moment (a hand-off or a
		// record is a few writes: the kill lands between two of them), or
		// Delay after it if the engine writes less.
		f.Call = 1 + int(span(0, 4))
		f.Delay = span(20*time.Millisecond, 200*time.Millisecond)
		if f.After != aimRegistry {
			continue
		}
		// The change nearest this slot that no other kill took and that
		// the long downtime does not cover.
		best := -1
		for j, ch := range changes {
			covered := long >= 0 && ch >= out[long].At-time.Second && ch <= out[long].At+down+time.Second
			if used[j] || covered || ch < time.Second || crowded(out, i, ch) {
				continue
			}
			if best < 0 || absDur(ch-f.At) < absDur(changes[best]-f.At) {
				best = j
			}
		}
		if best < 0 {
			f.After = aimUpstream
			continue
		}
		used[best] = true
		f.At = changes[best] - 150*time.Millisecond
	}
	return out, downAt, down
}

// crowded: another kill comes less than 1.5 s before or after t, or keeps
// the engine down at t (an aimed kill due while the engine is down is not
// carried out).
func crowded(kills []faults.Fault, self int, t time.Duration) bool {
	for j, k := range kills {
		if j != self && t > k.At-1500*time.Millisecond && t < k.At+k.RestartAfter+1500*time.Millisecond {
			return true
		}
	}
	return false
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

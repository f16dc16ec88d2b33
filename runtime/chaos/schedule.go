package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Action is one scheduled fault. (The simulator's fault schedule lives in
// sim/ and speaks virtual time and crash points; this one is real time and
// real processes, so it is kept small and here.)
type Action struct {
	At   time.Duration `json:"at_ns"`
	Kind string        `json:"kind"` // kill, db-cut, db-stall, bot-5xx, bot-refuse, bot-timeout, bot-slow, bot-dup
	Bot  string        `json:"bot,omitempty"`
	// For is the restart delay of a kill, and how long a stall or a bot
	// fault lasts.
	For time.Duration `json:"for_ns,omitempty"`
}

func (a Action) String() string {
	s := fmt.Sprintf("%8.3fs %-11s", a.At.Seconds(), a.Kind)
	if a.Bot != "" {
		s += " " + a.Bot
	}
	if a.For > 0 {
		if a.Kind == "kill" {
			s += fmt.Sprintf(" restart after %s", a.For.Round(time.Millisecond))
		} else {
			s += fmt.Sprintf(" for %s", a.For.Round(time.Millisecond))
		}
	}
	return s
}

// Plan draws the fault schedule of a run from its seed: kills spread over
// the fault phase, database cuts and stalls, and bot faults on every bot
// but the first (which stays healthy, so isolation has a witness).
func Plan(seed uint64, duration time.Duration, kills, dbCuts, botFaults int, bots []string) []Action {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	span := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var out []Action
	// Kills: one per slot of the fault phase, at a random point in it.
	for i := range kills {
		slot := duration / time.Duration(kills)
		at := time.Duration(i)*slot + span(slot/10, slot*9/10)
		out = append(out, Action{At: at, Kind: "kill", For: span(100*time.Millisecond, 800*time.Millisecond)})
	}
	for i := range dbCuts {
		slot := duration / time.Duration(dbCuts)
		at := time.Duration(i)*slot + span(0, slot)
		a := Action{At: at, Kind: "db-cut"}
		if rng.IntN(3) == 0 {
			a.Kind, a.For = "db-stall", span(500*time.Millisecond, 3*time.Second)
		}
		out = append(out, a)
	}
	if len(bots) > 1 {
		kinds := []string{"bot-5xx", "bot-refuse", "bot-timeout", "bot-slow", "bot-dup"}
		for range botFaults {
			out = append(out, Action{
				At:   span(0, duration*9/10),
				Kind: kinds[rng.IntN(len(kinds))],
				Bot:  bots[1+rng.IntN(len(bots)-1)],
				For:  span(500*time.Millisecond, 4*time.Second),
			})
		}
	}
	slices.SortStableFunc(out, func(a, b Action) int {
		if a.At != b.At {
			if a.At < b.At {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out
}

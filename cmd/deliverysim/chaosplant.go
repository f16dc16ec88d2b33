package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/runtime"
)

// chaosPlants are the planted variants of the reference engine that show
// the rules chaos judges with the declared settings catching something
// (runtime/PROTOCOL.md, "Rules judged with the declared settings"): serve
// runs with the arguments beside each name, the checks keep the declared
// settings. A setting served other than declared is, seen from the wire,
// an engine that does not keep it; the runtime's own plants
// (runtime.Plants) change what it does at its edges.
var chaosPlants = map[string]struct {
	rule  string
	serve []string
	// declare, if set, changes the declared settings (the checks' bounds,
	// and serve's own unless serve overrides them).
	declare func(*engine.Config)
}{
	// Backoff 1 ms (the workload's retryable 4xx answers to single events,
	// among 2xx answers that keep the bot's breaker closed, expose it).
	"no-backoff": {"retry-backoff", []string{"--initial-backoff", "1ms", "--max-backoff", "1ms"}, nil},
	// Declared one request in flight per bot, served eight.
	"over-in-flight":      {"in-flight-limit", []string{"--max-in-flight-per-bot", "8"}, func(c *engine.Config) { c.MaxInFlightPerBot = 1 }},
	"breaker-never-opens": {"breaker-policy", []string{"--breaker-failures", "1000000"}, nil},
	"overcount-acked":     {"reported-counters", []string{"--plant", "overcount-acked"}, nil},
	"resume-from-start":   {"resume-from-cursor", []string{"--plant", "resume-from-start"}, nil},
	// Snapshot sources (runtime/PROTOCOL.md, "Snapshot sources").
	"snapshot-skip-deletes":    {"snapshot-convergence", []string{"--plant", "snapshot-skip-deletes"}, nil},
	"snapshot-shared-baseline": {"snapshot-isolation", []string{"--plant", "snapshot-shared-baseline"}, nil},
	"snapshot-slow-feed":       {"snapshot-progress", []string{"--plant", "snapshot-slow-feed"}, nil},
	// Retention of held messages (seed 003; runtime/PROTOCOL.md,
	// "retention-bounds"): the cap trims the newest held messages
	// (seed 003's bug, runtime.Plants.RetentionKeepsOldest), a TTL served thirty times shorter
	// than declared, drops left out of /v1/observe, and no retention at all.
	"retention-keeps-oldest": {"retention-bounds", []string{"--plant", "retention-keeps-oldest"}, nil},
	"retention-drops-young":  {"retention-bounds", []string{"--retention-ttl", "100ms"}, nil},
	"retention-uncounted":    {"retention-bounds", []string{"--plant", "retention-uncounted"}, nil},
	"retention-never-drops":  {"retention-bounds", []string{"--retention-ttl", "168h", "--retention-max", "1000000"}, nil},
}

// chaosPlantDeclare applies the plants' changes to the declared settings.
func chaosPlantDeclare(s string, c *engine.Config) {
	for _, n := range strings.Split(s, ",") {
		if p, ok := chaosPlants[strings.TrimSpace(n)]; ok && p.declare != nil {
			p.declare(c)
		}
	}
}

func chaosPlantNames() string {
	ns := make([]string, 0, len(chaosPlants))
	for n, p := range chaosPlants {
		ns = append(ns, n+" ("+p.rule+")")
	}
	sort.Strings(ns)
	return strings.Join(ns, ", ")
}

// chaosPlantArgs are serve's extra arguments for the comma-separated plants.
func chaosPlantArgs(s string) ([]string, error) {
	var out []string
	var runtimePlants []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		p, ok := chaosPlants[n]
		if !ok {
			return nil, usagef("chaos: --plant %q: known plants: %s", n, chaosPlantNames())
		}
		if len(p.serve) == 2 && p.serve[0] == "--plant" {
			runtimePlants = append(runtimePlants, p.serve[1])
			continue
		}
		out = append(out, p.serve...)
	}
	if len(runtimePlants) > 0 {
		if _, err := runtime.ParsePlants(strings.Join(runtimePlants, ",")); err != nil {
			return nil, fmt.Errorf("internal: %v", err)
		}
		out = append(out, "--plant", strings.Join(runtimePlants, ","))
	}
	return out, nil
}

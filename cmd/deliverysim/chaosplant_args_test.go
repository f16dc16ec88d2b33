package main

import (
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/impl/engine"
)

// Every plant's serve command gives each flag once, with the plant's value:
// serve refuses a repeated flag, so a plant appended beside the declared
// setting started no engine at all (every incarnation exited at once).
func TestChaosPlantServeArgsGiveEachFlagOnce(t *testing.T) {
	for name, p := range chaosPlants {
		planted, err := chaosPlantArgs(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// The declared settings as chaos passes them: the plant's own
		// declaration changes them, so serve is told them explicitly.
		eng := engine.DefaultConfig()
		chaosPlantDeclare(name, &eng)
		args := overrideFlags(chaosServeArgs("", "queued", eng), planted)
		seen := map[string]int{}
		for i, a := range args {
			if strings.HasPrefix(a, "--") {
				if _, dup := seen[a]; dup {
					t.Errorf("%s: %s given twice: %v", name, a, args)
				}
				seen[a] = i
			}
		}
		for i := 0; i+1 < len(p.serve); i += 2 {
			j, ok := seen[p.serve[i]]
			if !ok || j+1 >= len(args) || (p.serve[i] != "--plant" && args[j+1] != p.serve[i+1]) {
				t.Errorf("%s: %s %s not served: %v", name, p.serve[i], p.serve[i+1], args)
			}
		}
	}
}

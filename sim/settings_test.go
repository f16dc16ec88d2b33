package sim

import (
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"github.com/deliverysim/deliverysim/model/oracle"
)

// The probe never fires on the reference engine's Validate, and over a
// few thousand seeds it tries every documented range from both sides.
func TestSettingsProbeOnTheReference(t *testing.T) {
	tried := map[string]map[bool]bool{}
	for seed := uint64(1); seed <= 3000; seed++ {
		base := DrawWorkload(seed).EngineConfig()
		if vs := probeSettings(seed, base, Epoch, 1, construct); len(vs) > 0 {
			t.Fatalf("seed %d: %v", seed, vs[0])
		}
		_ = probeSettings(seed, base, Epoch, 1, func(c engine.Config) error {
			err := c.Validate()
			var field string
			if ce, ok := err.(*engine.ConfigError); ok {
				field = ce.Field
			}
			for _, r := range settingRules {
				if tried[r.field] == nil {
					tried[r.field] = map[bool]bool{}
				}
				if field == r.field {
					tried[r.field][false] = true
				}
			}
			if err == nil {
				for _, r := range settingRules {
					tried[r.field][true] = true
				}
			}
			return err
		})
	}
	for _, r := range settingRules {
		if !tried[r.field][false] {
			t.Errorf("no probe of %s was refused: its range is never crossed", r.field)
		}
	}
}

// Planted bugs of the class the probe closes: a validation that lets a
// zero retry limit through, one that refuses a valid edge (a constant
// backoff, Multiplier 1), and one that names the wrong setting. Each is
// caught within a few hundred seeds.
func TestSettingsProbeCatchesPlantedValidationBugs(t *testing.T) {
	planted := map[string]func(engine.Config) error{
		"accepts MaxAttempts 0": func(c engine.Config) error {
			if c.MaxAttempts == 0 {
				c.MaxAttempts = 1
			}
			return c.Validate()
		},
		"refuses Multiplier 1": func(c engine.Config) error {
			if c.Multiplier == 1 {
				return &engine.ConfigError{Field: "Multiplier", Msg: "Multiplier must exceed 1"}
			}
			return c.Validate()
		},
		"names the wrong setting": func(c engine.Config) error {
			err := c.Validate()
			if ce, ok := err.(*engine.ConfigError); ok && ce.Field == "Lease" {
				return &engine.ConfigError{Field: "WebhookTimeout", Msg: ce.Msg}
			}
			return err
		},
	}
	for name, validate := range planted {
		caught := uint64(0)
		for seed := uint64(1); seed <= 2000 && caught == 0; seed++ {
			vs := probeSettings(seed, DrawWorkload(seed).EngineConfig(), Epoch.Add(time.Hour), 7, validate)
			for _, v := range vs {
				if v.Invariant != oracle.InvSettingsValidation || v.Detail == "" {
					t.Fatalf("%s: malformed violation %v", name, v)
				}
				caught = seed
			}
		}
		if caught == 0 {
			t.Errorf("%s: not caught in 2000 seeds", name)
		} else {
			t.Logf("%s: caught at seed %d", name, caught)
		}
	}
}

package sim

import (
	"errors"
	"fmt"
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
// backoff, Multiplier 1), one that names the wrong setting, and one whose
// refusal quotes a wrong bound (Lease + WebhookTimeout for AckDelay). Each is
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
		"quotes the wrong AckDelay bound": func(c engine.Config) error {
			err := c.Validate()
			if ce, ok := err.(*engine.ConfigError); ok && ce.Field == "AckDelay" {
				return &engine.ConfigError{Field: "AckDelay", Msg: fmt.Sprintf("AckDelay is %v; it must be below Lease - WebhookTimeout (%v)", c.AckDelay, c.Lease+c.WebhookTimeout)}
			}
			return err
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

// The text form of the enum settings: the reference engine's round trip,
// and planted MarshalText bugs of the kinds a mutant makes (a valid mode
// refused, an invalid one written or panicking, a name that reads back as
// another mode).
func TestEnumTextFault(t *testing.T) {
	real := func(v any) (func() ([]byte, error), func([]byte) (any, error)) {
		switch v := v.(type) {
		case engine.CursorMode:
			return v.MarshalText, func(b []byte) (any, error) { var m engine.CursorMode; err := m.UnmarshalText(b); return m, err }
		case engine.HandOff:
			return v.MarshalText, func(b []byte) (any, error) { var h engine.HandOff; err := h.UnmarshalText(b); return h, err }
		}
		t.Fatalf("no text form for %T", v)
		return nil, nil
	}
	for _, tc := range []struct {
		name    string
		v       any
		inside  bool
		marshal func() ([]byte, error) // nil: the engine's own
		back    func([]byte) (any, error)
		fires   bool
	}{
		{name: "sync", v: engine.CursorSync, inside: true},
		{name: "async", v: engine.CursorAsync, inside: true},
		{name: "queued", v: engine.HandOffQueued, inside: true},
		{name: "direct", v: engine.HandOffDirect, inside: true},
		{name: "cursor mode -1", v: engine.CursorMode(-1)},
		{name: "cursor mode 2", v: engine.CursorMode(2)},
		{name: "hand-off -1", v: engine.HandOff(-1)},
		{name: "hand-off 2", v: engine.HandOff(2)},
		{name: "a valid mode refused", v: engine.CursorAsync, inside: true, fires: true,
			marshal: func() ([]byte, error) { return nil, errors.New("1 is not a cursor mode") }},
		{name: "an invalid mode written", v: engine.HandOff(2), fires: true,
			marshal: func() ([]byte, error) { return []byte("direct"), nil }},
		{name: "an invalid mode panics", v: engine.CursorMode(2), fires: true,
			marshal: func() ([]byte, error) { return []byte([]string{"sync", "async"}[2]), nil }},
		{name: "reads back as another mode", v: engine.HandOffDirect, inside: true, fires: true,
			marshal: func() ([]byte, error) { return []byte("queued"), nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, back := real(tc.v)
			if tc.marshal != nil {
				m = tc.marshal
			}
			if tc.back != nil {
				back = tc.back
			}
			got := enumTextFault("X", tc.v, tc.inside, m, back)
			if (got != "") != tc.fires {
				t.Fatalf("fires=%v, want %v: %q", got != "", tc.fires, got)
			}
		})
	}
}

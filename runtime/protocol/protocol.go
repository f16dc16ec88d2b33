// Package protocol holds the wire types of the two HTTP boundaries a
// delivery engine has (runtime/PROTOCOL.md describes them for implementers
// in any language): the upstream, which serves ordered streams of events
// with replay from a position, and the registry, which serves bots, their
// secrets and webhook URLs, memberships and key publication.
//
// Both sides of this repository use these types: the real runtime
// (runtime.Run, a client of both) and the chaos harness (runtime/chaos, a
// server of both).
package protocol

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// Paths served under the upstream and registry base URLs.
const (
	// PathEvents is GET {upstream}/v1/streams/{stream}/events.
	PathEvents = "/v1/streams/"
	// PathRegistry is GET {registry}/v1/registry.
	PathRegistry = "/v1/registry"
)

// Stream kinds on the wire.
const (
	KindLog       = "log"
	KindTimestamp = "timestamp"
)

// Position is impl.Position on the wire.
type Position struct {
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
	ID    string `json:"id,omitempty"`
}

// Pos converts to the engine's position.
func (p Position) Pos() impl.Position { return impl.Position{Major: p.Major, Minor: p.Minor, ID: p.ID} }

// FromPos converts from the engine's position.
func FromPos(p impl.Position) Position { return Position{Major: p.Major, Minor: p.Minor, ID: p.ID} }

// FormatAfter writes a log position as the "after" query value "major.minor".
func FormatAfter(p impl.Position) string {
	return strconv.FormatInt(p.Major, 10) + "." + strconv.FormatInt(p.Minor, 10)
}

// ParseAfter reads "major.minor".
func ParseAfter(s string) (impl.Position, error) {
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return impl.Position{}, fmt.Errorf("after=%q: want major.minor, e.g. after=3.14", s)
	}
	ma, err1 := strconv.ParseInt(a, 10, 64)
	mi, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil {
		return impl.Position{}, fmt.Errorf("after=%q: want two integers major.minor, e.g. after=3.14", s)
	}
	return impl.Position{Major: ma, Minor: mi}, nil
}

// Event is one upstream event. Payload is the webhook body, base64 (std)
// so that any bytes travel.
type Event struct {
	ID        string    `json:"id"`
	Pos       Position  `json:"pos"`
	Payload   string    `json:"payload"`
	CreatedAt time.Time `json:"created_at"`
}

// Events is the answer to one GET of a stream's events: the events in
// arrival order (a replay first, then live ones), the sync cookie after
// them (opaque; base64) and Next, the offset to pass as ?next= to continue
// the tail without a gap or a replay.
type Events struct {
	Stream string  `json:"stream"`
	Kind   string  `json:"kind"`
	Events []Event `json:"events"`
	Cookie string  `json:"cookie,omitempty"`
	Next   int64   `json:"next"`
	// RegistryVersion is the registry version these events were produced
	// under: an engine must have applied the registry at least up to it
	// before it decides who is owed them (membership changes travel on
	// the registry, events on the upstream; this orders the two).
	RegistryVersion int64 `json:"registry_version,omitempty"`
}

// EngineEvents converts the wire batch to the engine's events.
func (b Events) EngineEvents() ([]engine.Event, error) {
	out := make([]engine.Event, 0, len(b.Events))
	for _, e := range b.Events {
		p, err := base64.StdEncoding.DecodeString(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("event %s: payload is not base64: %v", e.ID, err)
		}
		out = append(out, engine.Event{ID: e.ID, Stream: b.Stream, Pos: e.Pos.Pos(), Payload: p, CreatedAt: e.CreatedAt})
	}
	return out, nil
}

// Bot is one subscriber in the registry.
type Bot struct {
	ID     string `json:"id"`
	Secret string `json:"secret"` // base64 (std) of the HMAC key
	URL    string `json:"url"`    // where its webhooks are POSTed
	HasKey bool   `json:"has_key"`
}

// Membership is engine.Membership on the wire.
type Membership struct {
	Stream string   `json:"stream"`
	Kind   string   `json:"kind"`
	Bot    string   `json:"bot"`
	From   Position `json:"from"`
	Member bool     `json:"member"`
}

// Registry is the answer to GET /v1/registry: the whole registry at
// Version. Memberships only grow (append-only, in the order they were
// made); bots are never removed.
type Registry struct {
	Version     int64        `json:"version"`
	Bots        []Bot        `json:"bots"`
	Memberships []Membership `json:"memberships"`
}

// KindOf maps the wire kind to the engine's.
func KindOf(s string) (engine.StreamKind, error) {
	switch s {
	case KindLog, "":
		return engine.LogStream, nil
	case KindTimestamp:
		return engine.TimestampStream, nil
	}
	return 0, fmt.Errorf("stream kind %q: want %q or %q", s, KindLog, KindTimestamp)
}

// KindName maps the engine's kind to the wire name.
func KindName(k engine.StreamKind) string {
	if k == engine.TimestampStream {
		return KindTimestamp
	}
	return KindLog
}

// EngineMembership converts m.
func (m Membership) EngineMembership() (engine.Membership, error) {
	k, err := KindOf(m.Kind)
	if err != nil {
		return engine.Membership{}, err
	}
	return engine.Membership{Stream: m.Stream, Kind: k, Bot: m.Bot, From: m.From.Pos(), Member: m.Member}, nil
}

// EngineBot converts b.
func (b Bot) EngineBot() (engine.Bot, error) {
	s, err := base64.StdEncoding.DecodeString(b.Secret)
	if err != nil {
		return engine.Bot{}, fmt.Errorf("bot %s: secret is not base64: %v", b.ID, err)
	}
	return engine.Bot{ID: b.ID, Secret: s, HasKey: b.HasKey}, nil
}

package protocol

// PathObserve is GET {engine listen}/v1/observe: the engine's optional,
// read-only report of its durable state (PROTOCOL.md, "Observation").
// Certification judges from it what the wire cannot show: where the durable
// cursors stand, and which messages the engine gave up on.
const PathObserve = "/v1/observe"

// Observation is the answer of the observation endpoint. Every field is
// optional: a nil slice (the field absent from the JSON) means the engine
// does not expose it, and the checks that need it are not judged; an empty
// one means "none".
type Observation struct {
	// Cursors: per stream, the position the engine would resume from after
	// a restart (its durable cursor, the lowest when it keeps several).
	Cursors []ObservedCursor `json:"cursors"`
	// DeadLetters: every message the engine holds as given up, with the
	// attempts it counted.
	DeadLetters []DeadLetter `json:"dead_letters"`
	// QueueDepth: messages the engine still owes (queued, not dead).
	QueueDepth *int `json:"queue_depth,omitempty"`
	// RetentionDrops: per bot, how many of its messages the engine's
	// retention deleted since its store was created, by rule (seed 003:
	// the TTL and the per-bot cap). Absent: not reported; [] none.
	RetentionDrops []RetentionDrop `json:"retention_drops"`
}

// RetentionDrop is one bot's retention drops, by rule.
type RetentionDrop struct {
	Bot string `json:"bot"`
	TTL int64  `json:"ttl"`
	Cap int64  `json:"cap"`
}

// ObservedCursor is one stream's durable cursor.
type ObservedCursor struct {
	Stream string   `json:"stream"`
	Pos    Position `json:"pos"`
}

// DeadLetter is one message the engine gave up on.
type DeadLetter struct {
	Bot      string `json:"bot"`
	Event    string `json:"event"`
	Attempts int    `json:"attempts"`
}

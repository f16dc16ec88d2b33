package engine

import (
	"strings"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

// sigLen is the length of a signature value: "v1," + base64 of 32 bytes.
const sigLen = 3 + 44

// sigArena hands out signature strings cut from shared blocks instead of
// allocating each: a replay sends every event, and one small allocation
// per send was a fifth of the direct hand-off's time in memory (the
// replay benchmark's profile). A block is a strings.Builder's buffer, which
// is only ever appended to, so every string cut from it stays immutable; a
// full block is left to the strings still pointing into it. The cost is
// that one live signature keeps its block (sigArenaBlock signatures,
// about 3 KB) from being collected.
type sigArena struct {
	b       strings.Builder
	scratch [sigLen]byte
}

const sigArenaBlock = 64

func (a *sigArena) sign(s *webhook.Signer, id string, ts int64, body []byte) string {
	if a.b.Cap()-a.b.Len() < sigLen {
		a.b = strings.Builder{}
		a.b.Grow(sigLen * sigArenaBlock)
	}
	start := a.b.Len()
	a.b.Write(s.AppendSign(a.scratch[:0], id, ts, body))
	return a.b.String()[start:]
}

package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/engine"
)

// perMiniblock is how many events one generated miniblock holds; positions
// are (miniblock, index) as on a seed-000 log stream.
const perMiniblock = 100

// dataEpoch stamps the generated events; nothing reads it as a clock.
var dataEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stream is one generated upstream log: every event strictly after the
// pre-stored cursor, in position order. It holds no pointers per event
// (ids are slices of one string, payloads of one buffer, positions follow
// from the index), so the garbage collector never walks a million events
// while the engine is being measured: a replay's upstream events come off
// the network and die young, they do not sit in the engine's heap.
type stream struct {
	id       string
	n        int
	ids      string // n fixed-width event ids, back to back
	idWidth  int
	payloads []byte // n payloads of payloadBytes, back to back
	size     int    // payload bytes per event
}

// event materialises the i-th event; it allocates nothing.
func (s *stream) event(i int) engine.Event {
	return engine.Event{
		ID:        s.ids[i*s.idWidth : (i+1)*s.idWidth],
		Stream:    s.id,
		Pos:       posOf(i),
		Payload:   s.payloads[i*s.size : (i+1)*s.size : (i+1)*s.size],
		CreatedAt: dataEpoch.Add(time.Duration(i) * time.Millisecond),
	}
}

// fill writes events [from, to) into dst (reusing its memory) and returns
// it, as an upstream client decoding a batch would.
func (s *stream) fill(dst []engine.Event, from, to int) []engine.Event {
	dst = dst[:0]
	for i := from; i < to; i++ {
		dst = append(dst, s.event(i))
	}
	return dst
}

// dataset is everything a replay hands out, built before any timer starts
// so that generating it is never measured.
type dataset struct {
	streams []stream
	bots    []engine.Bot
	total   int
}

func streamName(i int) string { return fmt.Sprintf("stream-%03d", i) }
func botName(i int) string    { return fmt.Sprintf("bot-%03d", i) }

// genData spreads events over streams (the first ones get the remainder),
// with distinct pseudo-random payloads.
// A cancelled ctx stops it early (with a partial dataset the caller drops):
// ten million events take seconds to make.
func genData(ctx context.Context, events, streams, bots, payloadBytes int, seed uint64) dataset {
	rng := rand.New(rand.NewPCG(seed, 0x6265_6e63_68))
	d := dataset{total: events}
	for s := range streams {
		n := events / streams
		if s < events%streams {
			n++
		}
		st := stream{id: streamName(s), n: n, size: payloadBytes}
		st.idWidth = len(eventID(s, 0))
		var ids strings.Builder
		ids.Grow(n * st.idWidth)
		for i := range n {
			if i%65536 == 0 && ctx.Err() != nil {
				return d
			}
			ids.WriteString(eventID(s, i))
		}
		st.ids = ids.String()
		st.payloads = make([]byte, n*payloadBytes)
		for i := 0; i+8 <= len(st.payloads); i += 8 {
			binary.LittleEndian.PutUint64(st.payloads[i:], rng.Uint64())
		}
		d.streams = append(d.streams, st)
	}
	for b := range bots {
		secret := make([]byte, 32)
		binary.LittleEndian.PutUint64(secret, rng.Uint64())
		binary.LittleEndian.PutUint64(secret[8:], rng.Uint64())
		d.bots = append(d.bots, engine.Bot{ID: botName(b), Secret: secret, HasKey: true})
	}
	return d
}

// eventID is fixed-width so that ids can be cut out of one string.
func eventID(stream, i int) string { return fmt.Sprintf("s%03d-e%09d", stream, i) }

// posOf is the position of a stream's i-th generated event. Miniblock 0
// holds the history before the stored cursor.
func posOf(i int) impl.Position {
	return impl.Position{Major: int64(1 + i/perMiniblock), Minor: int64(i % perMiniblock)}
}

// startCursor is what the "previous run" left behind for each stream: the
// end of miniblock 0, so everything generated lies after it.
func startCursor(streamID string) impl.Cursor {
	return impl.Cursor{
		Key:       impl.CursorKey{Stream: streamID},
		Pos:       impl.Position{Major: 0, Minor: perMiniblock - 1},
		Token:     cookie(0),
		UpdatedAt: dataEpoch,
	}
}

// cookie is the sync cookie after a miniblock (generation + fake hash).
func cookie(major int64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(major))
	binary.BigEndian.PutUint64(b[8:], uint64(major)*0x9e3779b97f4a7c15)
	return b
}

// registry makes every bot a member of every stream from the start, so
// each event is owed to each bot.
func (d *dataset) registry() engine.Registry {
	reg := engine.Registry{Bots: d.bots}
	for _, st := range d.streams {
		for _, b := range d.bots {
			reg.Memberships = append(reg.Memberships, engine.Membership{
				Stream: st.id, Kind: engine.LogStream, Bot: b.ID, From: impl.Position{}, Member: true,
			})
		}
	}
	return reg
}

// after returns the index of the first event strictly after pos: what the
// upstream replays for a Subscribe from pos.
func (s *stream) after(pos impl.Position) int {
	return sort.Search(s.n, func(i int) bool { return posOf(i).Compare(pos) > 0 })
}

// last is the position of the stream's last event.
func (s *stream) last() impl.Position { return posOf(s.n - 1) }

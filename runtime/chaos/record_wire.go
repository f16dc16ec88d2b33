// What the rules judged with the declared settings (judge_wire.go) need
// beside the wire's requests: each opening fetch of a stream, each
// cursor reading of the observation endpoint, each /metrics scrape.

package chaos

import (
	"net/url"
	"strconv"
	"time"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/runtime/protocol"
)

// fetch is an opening request of a stream (after=, since= or from=head;
// not a next= continuation): where a subscription starts.
type fetch struct {
	at     time.Time
	stream string
	head   bool          // from=head
	since  bool          // since= (timestamp streams): start.Major holds the ms
	start  impl.Position // after= or since=
	// produced is how many events had been produced (r.order) when the
	// fetch arrived: every one of them was in the upstream already.
	produced int
}

type cursorRead struct {
	at      time.Time
	cursors []protocol.ObservedCursor
}

// scrape is one reading of the engine's /metrics counters.
type scrape struct {
	at          time.Time
	acked, sent float64
}

type wireSeen struct {
	fetches     []fetch
	cursorReads []cursorRead
	scrapeReads []scrape
	// finalScrape: read once the settle ended, before SIGTERM (zero: none).
	finalScrape scrape
}

// fetched records an opening request of a stream (a next= continuation
// is not one); a query the upstream refuses is recorded too, and judged
// by what it asked for.
func (r *recorder) fetched(stream string, q url.Values) {
	f := fetch{at: time.Now(), stream: stream}
	switch {
	case q.Has("next"):
		return
	case q.Get("from") == "head":
		f.head = true
	case q.Has("since"):
		ms, err := strconv.ParseInt(q.Get("since"), 10, 64)
		if err != nil {
			return
		}
		f.since, f.start = true, impl.Position{Major: ms}
	case q.Has("after"):
		p, err := protocol.ParseAfter(q.Get("after"))
		if err != nil {
			return
		}
		f.start = p
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f.produced = len(r.order)
	r.fetches = append(r.fetches, f)
}

func (r *recorder) scraped(s scrape, final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if final {
		r.finalScrape = s
		return
	}
	r.scrapeReads = append(r.scrapeReads, s)
}

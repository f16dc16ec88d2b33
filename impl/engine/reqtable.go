package engine

// reqTable holds the outstanding webhook requests by id. Ids are handed
// out in increasing order and answers come back roughly in that order, so
// the table is a ring of slots covering the ids from the oldest outstanding
// one to the newest: a lookup is an index, and a replay that keeps a
// thousand requests in flight reuses the same slots instead of churning a
// hash map (which cost one allocation per send in the replay profile).
// A request left unanswered keeps the window open behind it until it is
// answered or expired (expireRequests, after a lease), which bounds the
// window by the sends of one lease plus a cleanup interval.
type reqTable struct {
	ring []reqSlot // length 0 or a power of two
	head int       // ring index of id base
	base uint64    // id of the oldest slot in the window
	size int       // slots in the window, live or not
	live int
}

type reqSlot struct {
	req  request
	live bool
}

func (t *reqTable) Len() int { return t.live }

// put adds the request with id, which must be greater than every id put
// before it.
func (t *reqTable) put(id uint64, r request) { *t.add(id) = r }

// add is put for a caller that fills the request in place (a send builds
// it once, where it is kept): the returned slot is zero and live, and
// stays valid until the next add.
func (t *reqTable) add(id uint64) *request {
	if t.size == 0 {
		t.base = id
	}
	for t.base+uint64(t.size) < id {
		t.push() // an id handed out without a request
	}
	s := t.push()
	s.live = true
	t.live++
	return &s.req
}

// push opens a zero slot at the end of the window.
func (t *reqTable) push() *reqSlot {
	if t.size == len(t.ring) {
		grown := make([]reqSlot, max(64, 2*len(t.ring)))
		for k := range t.size {
			grown[k] = t.ring[(t.head+k)&(len(t.ring)-1)]
		}
		t.ring, t.head = grown, 0
	}
	s := &t.ring[(t.head+t.size)&(len(t.ring)-1)]
	t.size++
	return s
}

func (t *reqTable) slot(id uint64) *reqSlot {
	if id < t.base || id-t.base >= uint64(t.size) {
		return nil
	}
	s := &t.ring[(t.head+int(id-t.base))&(len(t.ring)-1)]
	if !s.live {
		return nil
	}
	return s
}

func (t *reqTable) get(id uint64) (request, bool) {
	if s := t.slot(id); s != nil {
		return s.req, true
	}
	return request{}, false
}

// take removes and returns the request with id.
func (t *reqTable) take(id uint64) (request, bool) {
	s := t.slot(id)
	if s == nil {
		return request{}, false
	}
	r := s.req
	t.remove(s)
	return r, true
}

// remove ends slot s (live, from slot) in place: a caller that has read
// what it needs through the slot saves take's copy of the request.
func (t *reqTable) remove(s *reqSlot) {
	*s = reqSlot{} // drop the payload and snapshot references
	t.live--
	for t.size > 0 && !t.ring[t.head].live {
		t.head = (t.head + 1) & (len(t.ring) - 1)
		t.base++
		t.size--
	}
}

// ids returns the outstanding ids in increasing order.
func (t *reqTable) ids() []uint64 {
	out := make([]uint64, 0, t.live)
	for k := range t.size {
		if t.ring[(t.head+k)&(len(t.ring)-1)].live {
			out = append(out, t.base+uint64(k))
		}
	}
	return out
}

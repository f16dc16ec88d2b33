package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/internal/pgtest"
)

// outcome of one store call as its caller saw it.
type faultOutcome int

const (
	outApplied   faultOutcome = iota // returned nil: must be durable
	outRejected                      // error without ErrAmbiguous: must have had no effect
	outAmbiguous                     // error wrapping ErrAmbiguous: all of it or none of it
)

func faultClassify(err error) faultOutcome {
	switch {
	case err == nil:
		return outApplied
	case errors.Is(err, impl.ErrAmbiguous):
		return outAmbiguous
	}
	return outRejected
}

func (o faultOutcome) String() string { return [...]string{"applied", "rejected", "ambiguous"}[o] }

// faultLog is what one client did; the checks at the end replay it against
// what the database holds.
type faultLog struct {
	enqueues []faultEnqueue
	acks     []faultAck
	advances []faultAdvance
	records  []faultRecord
	outcomes map[faultOutcome]int
	killed   int // calls that failed because their session was terminated
}

type faultEnqueue struct {
	keys []impl.MessageKey
	out  faultOutcome
}

type faultAck struct {
	keys []impl.MessageKey
	out  faultOutcome
}

type faultAdvance struct {
	pos    int64 // every cursor of the batch moves to it
	shared int64 // the position written to the cursor all clients share
	out    faultOutcome
}

type faultRecord struct {
	version int
	out     faultOutcome
}

var pgT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// faultCallSucceeded gets a signal (dropped when one is already waiting)
// each time a fault client's call succeeds; the killer counts them to
// kill between calls that get through, whatever the machine's speed.
var faultCallSucceeded = make(chan struct{}, 1)

const (
	faultClients      = 4
	faultOpsPerClient = 120
	faultBatch        = 5
)

// Clients write while a killer terminates their server sessions at random
// moments, and some calls run out of time mid-flight. Afterwards every
// acknowledged write must be there, every write reported as failed (and not
// ambiguous) must be absent, and no batch may be half applied.
func TestPostgresConnectionKillLosesNoAcknowledgedWrite(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.NewSchema(t)
	// The killer finds this store's sessions, and only them, by name.
	appName := "fault-" + schema[max(0, len(schema)-50):]
	s := pgtest.OpenStore(t, dsn, schema, pgstore.Options{ApplicationName: appName, MaxConns: faultClients})

	killerConn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer killerConn.Close(ctx)

	done := make(chan struct{})
	var kills atomic.Int64
	var killerWG sync.WaitGroup
	killerWG.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			// Kill once 4 to 40 more calls got through (at least):
			// counted, not timed. A killer on a timer killed every session
			// before any call got through on a loaded machine (sessions
			// then take longer to connect than its period: a livelock),
			// and on a fast one could let every call finish before its
			// first kill, which fails the test below for want of kills.
			for range 4 + rng.IntN(37) {
				select {
				case <-done:
					return
				case <-faultCallSucceeded:
				}
			}
			var n int64
			err := killerConn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1 AND pid <> pg_backend_pid()`, appName).Scan(&n)
			if err != nil {
				t.Errorf("killer: %v", err)
				return
			}
			kills.Add(n)
		}
	})
	logs := runFaultClients(t, s)
	close(done)
	killerWG.Wait()

	killed := 0
	for _, l := range logs {
		killed += l.killed
	}
	st := faultVerify(t, dsn, schema, logs)
	t.Logf("sessions killed: %d; %s; %d calls hit a killed session", kills.Load(), st, killed)
	if killed == 0 {
		t.Fatal("no call hit a killed session, so the kills tested nothing")
	}
}

// A proxy between the store and the server cuts connections at random
// points, often after the server has executed (and committed) a call but
// before its reply gets through: the one failure a terminated session
// rarely produces, and the one that makes an outcome truly unknown. The
// store must call every such failure ambiguous, never a plain error.
func TestPostgresConnectionCutAfterCommitIsAmbiguous(t *testing.T) {
	dsn, schema := pgtest.NewSchema(t)
	proxy := startCutProxy(t, dsn)
	s := pgtest.OpenStore(t, proxy.dsn, schema, pgstore.Options{MaxConns: faultClients})
	proxy.armed.Store(true) // only now: Open's migrations must get through
	logs := runFaultClients(t, s)
	proxy.stop()

	st := faultVerify(t, dsn, schema, logs)
	t.Logf("connections cut: %d; %s", proxy.cuts.Load(), st)
	if st.ambiguousApplied == 0 {
		t.Fatal("no ambiguous call turned out to have committed, so the cuts never hit a reply to a committed write")
	}
}

func runFaultClients(t *testing.T, s *pgstore.Store) []*faultLog {
	logs := make([]*faultLog, faultClients)
	var sharedPos atomic.Int64
	var wg sync.WaitGroup
	for c := range faultClients {
		logs[c] = &faultLog{outcomes: map[faultOutcome]int{}}
		wg.Go(func() { runFaultClient(t, s, c, logs[c], &sharedPos) })
	}
	wg.Wait()
	return logs
}

// faultStats sums up what the clients saw and what the checks found.
type faultStats struct {
	outcomes         map[faultOutcome]int
	ambiguousApplied int // ambiguous calls whose effect is in the database
}

func (s faultStats) String() string {
	return fmt.Sprintf("calls: %d applied, %d rejected, %d ambiguous (%d of those took effect)",
		s.outcomes[outApplied], s.outcomes[outRejected], s.outcomes[outAmbiguous], s.ambiguousApplied)
}

// faultVerify checks every client's log against the database, read through
// a fresh store (the faulty one's pool is full of dead sessions).
func faultVerify(t *testing.T, dsn, schema string, logs []*faultLog) faultStats {
	t.Helper()
	st := faultStats{outcomes: map[faultOutcome]int{}}
	for _, l := range logs {
		for o, n := range l.outcomes {
			st.outcomes[o] += n
		}
	}
	check := pgtest.OpenStore(t, dsn, schema, pgstore.Options{})
	for c, l := range logs {
		st.ambiguousApplied += faultVerifyQueue(t, check, c, l)
		faultVerifyCursors(t, check, c, l)
		faultVerifyDelivered(t, check, c, l)
	}
	faultVerifySharedCursor(t, check, logs)
	return st
}

// cutProxy forwards TCP between the store and PostgreSQL and, now and
// then, drops a chunk of the server's reply and closes both sides.
type cutProxy struct {
	dsn   string
	ln    net.Listener
	cuts  atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	rng   *rand.Rand
	conns map[net.Conn]bool
	armed atomic.Bool
}

func startCutProxy(t *testing.T, dsn string) *cutProxy {
	t.Helper()
	ln, target, proxied := pgtest.ProxyListen(t, dsn)
	p := &cutProxy{dsn: proxied, ln: ln, rng: rand.New(rand.NewPCG(11, 13)), conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(client, target) })
		}
	})
	t.Cleanup(p.stop)
	return p
}

func (p *cutProxy) cut() bool {
	if !p.armed.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(15) == 0
}

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) serve(client net.Conn, target string) {
	defer client.Close()
	if !p.track(client) {
		return
	}
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(server) {
		return
	}
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if p.cut() {
				p.cuts.Add(1)
				return // the reply is lost; both sides see the connection die
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stop closes the listener and every connection, so the store's pooled
// sessions die too, and waits for the proxy's goroutines.
func (p *cutProxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func runFaultClient(t *testing.T, s *pgstore.Store, c int, l *faultLog, sharedPos *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(c), 99))
	sub := fmt.Sprintf("bot-%d", c)
	var live []impl.MessageKey // enqueued for sure and not yet acked
	call := func(fn func(ctx context.Context) error) faultOutcome {
		timeout := 20 * time.Second
		if rng.IntN(5) == 0 {
			// A deadline that can expire before the request leaves, while
			// the server runs it (a cancel: the statement rolls back), or
			// after: outcomes of every kind, beside the kills' ambiguous ones.
			timeout = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := fn(ctx)
		out := faultClassify(err)
		l.outcomes[out]++
		if out == outApplied {
			select {
			case faultCallSucceeded <- struct{}{}:
			default: // the killer has one signal waiting already
			}
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.AdminShutdown {
			l.killed++
		}
		return out
	}
	for op := range faultOpsPerClient {
		switch k := rng.IntN(10); {
		case k < 4:
			var keys []impl.MessageKey
			var msgs []impl.Message
			for j := range faultBatch {
				key := impl.MessageKey{Subscriber: sub, EventID: fmt.Sprintf("e%04d-%d", op, j)}
				keys = append(keys, key)
				msgs = append(msgs, impl.Message{Subscriber: key.Subscriber, EventID: key.EventID, Stream: "s",
					Pos: impl.Position{Major: int64(op), Minor: int64(j)}, Payload: []byte(key.EventID), CreatedAt: pgT0.Add(time.Duration(op))})
			}
			out := call(func(ctx context.Context) error {
				n, err := s.Enqueue(ctx, msgs)
				if err == nil && n != len(msgs) {
					t.Errorf("client %d: Enqueue of %d fresh messages says it inserted %d", c, len(msgs), n)
				}
				return err
			})
			l.enqueues = append(l.enqueues, faultEnqueue{keys: keys, out: out})
			if out == outApplied {
				live = append(live, keys...)
			}
		case k < 6 && len(live) > 0:
			n := min(len(live), 1+rng.IntN(faultBatch))
			keys := slices.Clone(live[:n])
			out := call(func(ctx context.Context) error { _, err := s.Ack(ctx, keys); return err })
			l.acks = append(l.acks, faultAck{keys: keys, out: out})
			// Whatever happened, these keys are not acked again: their fate
			// is the one this call decided.
			live = live[n:]
		case k < 9:
			pos := int64(op + 1)
			shared := sharedPos.Add(1)
			var cs []impl.Cursor
			for i := range 3 {
				cs = append(cs, impl.Cursor{Key: impl.CursorKey{Stream: fmt.Sprintf("stream-%d-%d", c, i)},
					Pos: impl.Position{Major: pos}, Token: []byte(strconv.FormatInt(pos, 10)), UpdatedAt: pgT0})
			}
			cs = append(cs, impl.Cursor{Key: impl.CursorKey{Stream: "shared"}, Pos: impl.Position{Major: shared}, UpdatedAt: pgT0})
			if op%2 == 1 {
				// A repeated key sends the batch down the per-entry path.
				cs = append(cs, cs[0])
			}
			out := call(func(ctx context.Context) error { _, err := s.AdvanceCursors(ctx, cs); return err })
			l.advances = append(l.advances, faultAdvance{pos: pos, shared: shared, out: out})
		default:
			v := op + 1
			var items []impl.DeliveredItem
			for i := range 3 {
				items = append(items, impl.DeliveredItem{ID: fmt.Sprintf("file-%d", i), Version: strconv.Itoa(v)})
			}
			out := call(func(ctx context.Context) error {
				return s.RecordDelivered(ctx, "app", fmt.Sprintf("src-%d", c), items, nil)
			})
			l.records = append(l.records, faultRecord{version: v, out: out})
		}
	}
}

// faultVerifyQueue returns how many ambiguous calls turned out applied.
func faultVerifyQueue(t *testing.T, s *pgstore.Store, c int, l *faultLog) (ambiguousApplied int) {
	t.Helper()
	ms, err := s.ListMessages(context.Background(), fmt.Sprintf("bot-%d", c))
	if err != nil {
		t.Fatal(err)
	}
	present := map[impl.MessageKey]bool{}
	for _, m := range ms {
		present[m.Key()] = true
	}
	ackedBy := map[impl.MessageKey]faultOutcome{}
	for _, a := range l.acks {
		for _, k := range a.keys {
			ackedBy[k] = a.out
		}
	}
	for _, e := range l.enqueues {
		n := 0
		for _, k := range e.keys {
			if present[k] {
				n++
			}
		}
		switch e.out {
		case outRejected:
			if n != 0 {
				t.Errorf("client %d: an enqueue reported as failed left %d of %d messages behind", c, n, len(e.keys))
			}
		case outAmbiguous:
			if n != 0 && n != len(e.keys) {
				t.Errorf("client %d: an ambiguous enqueue is half applied: %d of %d messages present", c, n, len(e.keys))
			}
			if n == len(e.keys) {
				ambiguousApplied++
			}
		case outApplied:
			for _, k := range e.keys {
				ack, wasAcked := ackedBy[k]
				switch {
				case !wasAcked || ack == outRejected:
					if !present[k] {
						t.Errorf("client %d: acknowledged enqueue of %v lost (ack: %v)", c, k, faultAckOutcome(wasAcked, ack))
					}
				case ack == outApplied:
					if present[k] {
						t.Errorf("client %d: %v still queued after an acknowledged Ack", c, k)
					}
				}
			}
		}
	}
	for _, a := range l.acks {
		if a.out != outAmbiguous {
			continue
		}
		n := 0
		for _, k := range a.keys {
			if present[k] {
				n++
			}
		}
		if n != 0 && n != len(a.keys) {
			t.Errorf("client %d: an ambiguous Ack is half applied: %d of %d messages still queued", c, n, len(a.keys))
		}
		if n == 0 {
			ambiguousApplied++
		}
	}
	return ambiguousApplied
}

func faultAckOutcome(acked bool, o faultOutcome) string {
	if !acked {
		return "none"
	}
	return o.String()
}

// Every batch moves this client's three cursors to one position, so after
// any mix of whole batches they are equal; a half-applied batch splits them.
func faultVerifyCursors(t *testing.T, s *pgstore.Store, c int, l *faultLog) {
	t.Helper()
	var positions []int64
	for i := range 3 {
		cur, ok, err := s.GetCursor(context.Background(), impl.CursorKey{Stream: fmt.Sprintf("stream-%d-%d", c, i)})
		if err != nil {
			t.Fatal(err)
		}
		p := int64(0)
		if ok {
			p = cur.Pos.Major
			if string(cur.Token) != strconv.FormatInt(p, 10) {
				t.Errorf("client %d: cursor at %d carries the token of another write: %q", c, p, cur.Token)
			}
		}
		positions = append(positions, p)
	}
	if positions[0] != positions[1] || positions[1] != positions[2] {
		t.Errorf("client %d: a cursor batch was half applied: positions %v", c, positions)
	}
	final := positions[0]
	b := newCursorBounds()
	for _, a := range l.advances {
		b.add(a.out, a.pos)
	}
	if final < b.lastApplied {
		t.Errorf("client %d: cursor at %d, below the acknowledged advance to %d", c, final, b.lastApplied)
	}
	if !b.possible[final] {
		t.Errorf("client %d: cursor at %d, which only a call reported as failed wrote", c, final)
	}
}

// cursorBounds is where a cursor may end after a log of advances: at or
// above the highest one acknowledged, at a position some call that did not
// fail definitely may have written (or 0, never written).
type cursorBounds struct {
	lastApplied int64
	possible    map[int64]bool
}

func newCursorBounds() cursorBounds { return cursorBounds{possible: map[int64]bool{0: true}} }

func (b *cursorBounds) add(out faultOutcome, pos int64) {
	if out == outApplied {
		b.lastApplied = max(b.lastApplied, pos)
	}
	if out != outRejected {
		b.possible[pos] = true
	}
}

func faultVerifySharedCursor(t *testing.T, s *pgstore.Store, logs []*faultLog) {
	t.Helper()
	cur, ok, err := s.GetCursor(context.Background(), impl.CursorKey{Stream: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	var final int64
	if ok {
		final = cur.Pos.Major
	}
	b := newCursorBounds()
	for _, l := range logs {
		for _, a := range l.advances {
			b.add(a.out, a.shared)
		}
	}
	if final < b.lastApplied {
		t.Errorf("shared cursor at %d, below the acknowledged advance to %d: it regressed or lost a write", final, b.lastApplied)
	}
	if !b.possible[final] {
		t.Errorf("shared cursor at %d, which only a call reported as failed wrote", final)
	}
}

func faultVerifyDelivered(t *testing.T, s *pgstore.Store, c int, l *faultLog) {
	t.Helper()
	items, err := s.GetDelivered(context.Background(), "app", fmt.Sprintf("src-%d", c))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.records) == 0 {
		return
	}
	// Every call rewrites the same three items, so the state must be one
	// call's, whole.
	versions := map[string]bool{}
	for _, it := range items {
		versions[it.Version] = true
	}
	if len(items) != 0 && (len(items) != 3 || len(versions) != 1) {
		t.Errorf("client %d: delivered state mixes calls: %v", c, items)
		return
	}
	var lastApplied int
	possible := map[int]bool{0: true}
	for _, r := range l.records {
		if r.out == outApplied {
			lastApplied = r.version
		}
		if r.out != outRejected {
			possible[r.version] = true
		}
	}
	got := 0
	if len(items) > 0 {
		got, _ = strconv.Atoi(items[0].Version)
	}
	if got < lastApplied {
		t.Errorf("client %d: delivered state at version %d, older than the acknowledged %d", c, got, lastApplied)
	}
	if !possible[got] {
		t.Errorf("client %d: delivered state at version %d, which only a call reported as failed wrote", c, got)
	}
}

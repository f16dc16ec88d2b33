package conformance

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deliverysim/deliverysim/impl"
	"github.com/deliverysim/deliverysim/impl/memstore"
)

// hangingStore is a store whose ListMessages, once its run was stopped,
// blocks until the store is closed: a call stuck on a server. Only a
// cleanup that closes it lets the check go on.
type hangingStore struct {
	impl.Store
	stopped <-chan struct{}
	closed  chan struct{}
}

func (s *hangingStore) ListMessages(ctx context.Context, sub string) ([]impl.Message, error) {
	select {
	case <-s.stopped:
		<-s.closed
	default:
	}
	return s.Store.ListMessages(ctx, sub)
}

func (s *hangingStore) Close() error {
	close(s.closed)
	return s.Store.Close()
}

// Issue 38: a run stopped in the middle of a state-machine sequence
// abandons the check and closes every store it opened, the one the
// sequence holds included (its cleanup belongs to the sequence's scope,
// which an abandoned check never ends), so a pgcert schema is dropped.
// Nothing is opened after the stop, and the report says what was cut
// short and what never ran.
func TestStopAbandonsTheCheckAndClosesItsStores(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var opened, closed atomic.Int32
	f := Factory{
		Name:     "hanging",
		Features: Features{Concurrent: true},
		New: func(t testing.TB) impl.Store {
			s := &hangingStore{Store: memstore.New(), stopped: ctx.Done(), closed: make(chan struct{})}
			t.Cleanup(func() {
				_ = s.Close()
				closed.Add(1)
			})
			if opened.Add(1) == 5 {
				stop() // in the middle of the fifth sequence
			}
			return s
		},
	}
	cert, err := Certify([]Factory{f}, Only(GroupStateMachine, GroupLinearizability), Context(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if o, c := opened.Load(), closed.Load(); o != 5 || c != o {
		t.Errorf("%d stores opened, %d closed; want 5 and every one", o, c)
	}
	want := map[string]Status{"StateMachine/Random": Interrupted, "Linearizability/PerKey": NotRun}
	for _, r := range cert.Results {
		if w, ok := want[r.Name]; ok && r.Status != w {
			t.Errorf("%s: %s; want %s", r.Name, r.Status, w)
		}
	}
	if !cert.Interrupted || cert.Passed || cert.ExitCode() != ExitInterrupted {
		t.Errorf("interrupted %v, passed %v, exit %d; want an interrupted certificate, exit %d", cert.Interrupted, cert.Passed, cert.ExitCode(), ExitInterrupted)
	}
	var text strings.Builder
	if err := cert.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"INTERRUPTED StateMachine/Random", "NOT RUN Linearizability/PerKey", "verdict: INTERRUPTED ("} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the text lacks %q:\n%s", line, text.String())
		}
	}
}

package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer one goroutine writes (the in-process
// command's stderr) while another polls it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// heldBuffer is the in-process sweep's stderr. The first write that holds
// "sweep progress" blocks until the test has acted: the sweep is then held
// at a known point, some seeds reported and most still to come, whatever
// the machine's load (no race between the sweep ending and the test).
type heldBuffer struct {
	lockedBuffer
	reached chan struct{} // closed when the progress line is written
	release chan struct{} // closed by the test: the write returns
	once    sync.Once
}

func (h *heldBuffer) Write(p []byte) (int, error) {
	n, err := h.lockedBuffer.Write(p)
	if bytes.Contains(p, []byte("sweep progress")) {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.reached)
			<-h.release
		}
	}
	return n, err
}

// sweepRunning starts `deliverysim sweep args...` in process, holds it at
// its first progress line (some seeds were reported), runs act (cancel
// the context, cut the database) while it is held, lets it go on, and
// returns its stdout, its stderr, and the channel its exit status arrives
// on. A sweep that ends without logging progress fails the test; the
// seed range must be longer than one progress step (a twentieth of it).
func sweepRunning(t *testing.T, ctx context.Context, act func(), args ...string) (*bytes.Buffer, *lockedBuffer, <-chan int) {
	t.Helper()
	out := &bytes.Buffer{}
	errb := &heldBuffer{reached: make(chan struct{}), release: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"sweep"}, args...), out, errb, func(string) string { return "" })
	}()
	select {
	case <-errb.reached:
	case code := <-done:
		t.Fatalf("the sweep ended (exit %d) before it logged progress: %s", code, errb.String())
	case <-time.After(5 * time.Minute): // a hang detector only
		t.Fatalf("no progress line 5 minutes into the sweep: %s", errb.String())
	}
	act()
	close(errb.release)
	return out, &errb.lockedBuffer, done
}

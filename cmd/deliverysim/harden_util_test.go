package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
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

func runtimeGosched() {
	runtime.Gosched()
	time.Sleep(10 * time.Millisecond)
}

// sweepRunning starts `deliverysim sweep args...` in process and returns
// once it has logged progress (some seeds were reported): its stdout, its
// stderr, and the channel its exit status arrives on. A sweep that ends
// before that fails the test.
func sweepRunning(t *testing.T, ctx context.Context, args ...string) (*bytes.Buffer, *lockedBuffer, <-chan int) {
	t.Helper()
	out, errb := &bytes.Buffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"sweep"}, args...), out, errb, func(string) string { return "" })
	}()
	for !strings.Contains(errb.String(), "sweep progress") {
		select {
		case code := <-done:
			t.Fatalf("the sweep ended (exit %d) before it made progress: %s", code, errb.String())
		default:
			runtimeGosched()
		}
	}
	return out, errb, done
}

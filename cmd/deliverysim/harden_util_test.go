package main

import (
	"bytes"
	"runtime"
	"sync"
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

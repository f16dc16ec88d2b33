package chaos

import (
	"encoding/binary"
	"os"
	"syscall"
)

// watchWrites calls f after each write to a file directly in dir (the
// engine's state directory), as inotify reports it, until stop: an engine
// that keeps its state in files makes it durable there, and a kill aimed
// at a protocol moment counts those writes (run.go's durable).
func watchWrites(dir string, f func()) (stop func(), err error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_MODIFY); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	// Non-blocking, so the runtime's poller reads it and Close ends a
	// blocked Read.
	file := os.NewFile(uintptr(fd), "inotify")
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := file.Read(buf)
			if err != nil {
				return
			}
			// One call per event: each is a write the engine finished.
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				// struct inotify_event: wd, mask, cookie, then len (of the name
				// that follows).
				nameLen := binary.NativeEndian.Uint32(buf[off+12:])
				f()
				off += syscall.SizeofInotifyEvent + int(nameLen)
			}
		}
	}()
	return func() { _ = file.Close(); <-done }, nil
}

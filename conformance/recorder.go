package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records instead of reporting, so Check can
// run the very code Run runs (testify's require, rapid.Check, a Factory that
// calls t.Cleanup or t.Skip) without a *testing.T. FailNow and SkipNow end
// the calling goroutine with runtime.Goexit, exactly like testing.T, which
// is why every check runs on a goroutine of its own (runRecorded).
type recorder struct {
	// testing.TB is embedded only for its unexported method: an interface
	// cannot be implemented outside package testing otherwise. It is nil;
	// every exported method is implemented below.
	testing.TB

	name string

	mu       sync.Mutex
	failed   bool
	skipped  bool
	errs     []string
	logs     []string
	cleanups []func()
	ctx      context.Context
	cancel   context.CancelFunc
}

var _ testing.TB = (*recorder)(nil)

// newRecorder returns a recorder whose Context ends with parent's: an
// interrupted run's store calls and pgcert's schema set-up see it.
func newRecorder(parent context.Context, name string) *recorder {
	ctx, cancel := context.WithCancel(parent)
	return &recorder{name: name, ctx: ctx, cancel: cancel}
}

// abandonGrace is how long an abandoned check's goroutine is waited for
// after its cleanups ran: with its stores closed and its context done,
// its calls fail at once and it ends, running any cleanup it registered
// meanwhile (a schema whose CREATE raced the interruption). A check
// busy elsewhere (porcupine's search) is left behind: it holds nothing
// a process exit does not release.
const abandonGrace = 2 * time.Second

// runRecorded runs fn on a fresh goroutine with a fresh recorder, runs the
// registered cleanups when fn ends (normally, by Goexit, or by panic — a
// panic is recorded as a failure) and returns the recorder, and true. If
// ctx ends first, the check is abandoned: its cleanups run now (closing
// its stores, dropping their schemas), it is waited for up to
// abandonGrace, and runRecorded returns false.
func runRecorded(ctx context.Context, name string, fn func(t testing.TB)) (*recorder, bool) {
	r := newRecorder(ctx, name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.runCleanups()
		defer func() {
			if p := recover(); p != nil {
				r.record(true, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		fn(r)
	}()
	select {
	case <-done:
		return r, true
	case <-ctx.Done():
	}
	select {
	case <-done:
		// It ended as the run was stopped: its verdict stands.
		return r, true
	default:
	}
	r.runCleanups()
	select {
	case <-done:
	case <-time.After(abandonGrace):
	}
	return r, false
}

func (r *recorder) runCleanups() {
	r.cancel()
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.record(true, fmt.Sprintf("panic in cleanup: %v", p))
				}
			}()
			f()
		}()
	}
}

func (r *recorder) record(fail bool, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fail {
		r.failed = true
		r.errs = append(r.errs, msg)
	} else {
		r.logs = append(r.logs, msg)
	}
}

// maxLogLines keeps a report readable: rapid logs every step of the
// minimised case, which is what matters, but a long passing run logs more.
const maxLogLines = 200

func (r *recorder) outcome() (Status, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	logs := r.logs
	if len(logs) > maxLogLines {
		logs = append([]string{fmt.Sprintf("... %d earlier log lines dropped", len(logs)-maxLogLines)}, logs[len(logs)-maxLogLines:]...)
	}
	switch {
	case r.failed:
		msg := strings.Join(r.errs, "\n")
		if len(logs) > 0 {
			msg += "\nlog:\n" + strings.Join(logs, "\n")
		}
		return Fail, msg
	case r.skipped:
		return Skip, strings.Join(logs, "\n")
	}
	return Pass, strings.Join(logs, "\n")
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Helper()      {}

func (r *recorder) Log(args ...any) { r.record(false, strings.TrimSuffix(fmt.Sprintln(args...), "\n")) }
func (r *recorder) Logf(format string, args ...any) {
	r.record(false, fmt.Sprintf(format, args...))
}
func (r *recorder) Error(args ...any) {
	r.record(true, strings.TrimSuffix(fmt.Sprintln(args...), "\n"))
}
func (r *recorder) Errorf(format string, args ...any) { r.record(true, fmt.Sprintf(format, args...)) }
func (r *recorder) Fail() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}
func (r *recorder) FailNow() {
	r.Fail()
	runtime.Goexit()
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Fatal(args ...any) {
	r.Error(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.Log(args...)
	r.SkipNow()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.Logf(format, args...)
	r.SkipNow()
}
func (r *recorder) SkipNow() {
	r.mu.Lock()
	r.skipped = true
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}
func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}
func (r *recorder) Context() context.Context { return r.ctx }
func (r *recorder) Attr(key, value string)   { r.Logf("attr %s=%s", key, value) }
func (r *recorder) Output() io.Writer        { return logWriter{r} }

func (r *recorder) TempDir() string {
	dir, err := os.MkdirTemp("", "conformance-")
	if err != nil {
		r.Fatalf("TempDir: %v", err)
	}
	r.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (r *recorder) ArtifactDir() string {
	dir := filepath.Join(os.TempDir(), "conformance-artifacts", safeName(r.name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Fatalf("ArtifactDir: %v", err)
	}
	return dir
}

func (r *recorder) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		r.Fatalf("Setenv: %v", err)
	}
	r.Cleanup(func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

func (r *recorder) Chdir(dir string) {
	old, err := os.Getwd()
	if err != nil {
		r.Fatalf("Chdir: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		r.Fatalf("Chdir: %v", err)
	}
	r.Cleanup(func() { _ = os.Chdir(old) })
}

type logWriter struct{ r *recorder }

func (w logWriter) Write(p []byte) (int, error) {
	w.r.record(false, strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

// scope is a testing.TB whose cleanups run when the scope ends rather than
// when the test does: a rapid property creates one store per generated
// sequence, and a backend like Postgres should not keep a hundred schemas
// until the whole test finishes. Everything else goes to the parent.
type scope struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func newScope(parent testing.TB) *scope { return &scope{TB: parent} }

func (s *scope) Cleanup(f func()) {
	once := sync.OnceFunc(f)
	s.mu.Lock()
	s.cleanups = append(s.cleanups, once)
	s.mu.Unlock()
	// The parent holds it too: a check abandoned in the middle of a
	// sequence never reaches end, and the parent's cleanups are what an
	// interrupted run runs. Once the scope ended, the parent's is a no-op.
	s.TB.Cleanup(once)
}

func (s *scope) end() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

//go:build !linux

package chaos

// watchWrites: without inotify, kills aimed at a moment count only the
// database's answers through the proxy (and fall back to their delay).
func watchWrites(dir string, f func()) (stop func(), err error) { return func() {}, nil }

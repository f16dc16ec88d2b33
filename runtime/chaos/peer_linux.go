//go:build linux

package chaos

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerGone reports whether the engine has hung up on c as this host's
// kernel sees it now: its FIN (CLOSE_WAIT) or its reset (CLOSE) arrived.
// An answer written after that never reaches the engine.
func peerGone(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			gone = info.State == unix.BPF_TCP_CLOSE_WAIT || info.State == unix.BPF_TCP_CLOSE
		}
	})
	return gone
}

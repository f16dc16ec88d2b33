//go:build !linux

package chaos

import "net"

// peerGone: without TCP_INFO, only the server's own view (the request's
// context) says whether the engine hung up before an answer.
func peerGone(net.Conn) bool { return false }

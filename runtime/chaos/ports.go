package chaos

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The engine and the bots are listened on again and again on one address
// (each engine incarnation, each bot after a refuse fault). A port taken
// from the kernel (127.0.0.1:0) lies in the ephemeral range, which the
// kernel also hands out as the source port of outgoing connections: while
// the engine was down, any client on the machine (a database pool, a test
// beside this run) could take it, and every restart failed to listen
// until that connection closed (seen in CI: 50 exits of a healthy engine
// in 3 s). Ports below the ephemeral range are only ever taken by an
// explicit bind, so they are drawn from there.

var (
	portsMu sync.Mutex
	handed  = map[int]bool{} // ports this process handed out, never twice
)

// stablePortWindow is how many ports below the ephemeral range are drawn
// from.
const stablePortWindow = 10000

// stableListener listens on a loopback port outside the kernel's
// ephemeral range, free now and not handed out before by this process.
// Where that range cannot be read or leaves no room below it, it falls
// back to a kernel-chosen port.
func stableListener() (net.Listener, error) {
	lo, ok := ephemeralLow()
	if !ok || lo-stablePortWindow < 1024 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	var last error
	for range 200 {
		p := lo - stablePortWindow + rand.IntN(stablePortWindow)
		if handed[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			last = err
			continue
		}
		handed[p] = true
		return ln, nil
	}
	return nil, fmt.Errorf("no free loopback port below %d after 200 tries: %v", lo, last)
}

// stableAddr is stableListener's address, the listener closed: for a
// child process to listen on.
func stableAddr() (string, error) {
	ln, err := stableListener()
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil
}

package chaos

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStablePortsLieBelowTheEphemeralRange: the addresses the engine and
// the bots are listened on again and again must be ones no outgoing
// connection can take, and never handed out twice by one process.
func TestStablePortsLieBelowTheEphemeralRange(t *testing.T) {
	lo, ok := ephemeralLow()
	if !ok || lo-stablePortWindow < 1024 {
		t.Skipf("no ephemeral range to stay below here (%d, %v)", lo, ok)
	}
	seen := map[string]bool{}
	for range 50 {
		addr, err := stableAddr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p >= lo || p < lo-stablePortWindow {
			t.Fatalf("address %s: want 127.0.0.1 and a port in [%d,%d)", addr, lo-stablePortWindow, lo)
		}
		if seen[addr] {
			t.Fatalf("address %s handed out twice", addr)
		}
		seen[addr] = true
	}
}

// TestExitDetailQuotesTheEngine: an engine that dies on its own is
// reported with its exit and its last output, not a bare exit status.
func TestExitDetailQuotesTheEngine(t *testing.T) {
	log, err := os.Create(filepath.Join(t.TempDir(), "engine.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p := &engineProc{argv: []string{"/bin/sh", "-c", "echo first; echo 'cannot listen: address in use' >&2; exit 3", "sh"}, log: log}
	for i := range 2 {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute): // a hang detector only
			p.kill()
			t.Fatal("the child did not exit")
		}
		d := p.exitDetail()
		for _, want := range []string{"incarnation " + strconv.Itoa(i+1), "exit status 3", "cannot listen: address in use"} {
			if !strings.Contains(d, want) {
				t.Errorf("exit detail %q lacks %q", d, want)
			}
		}
		if strings.Contains(d, "starting incarnation") {
			t.Errorf("exit detail %q quotes the harness's own line", d)
		}
	}
}

package pgtest

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy forwards TCP from 127.0.0.1 to the server of a DSN until Cut: the
// database going away as its clients see it (every open connection closed,
// every new one refused), while the server itself stays up for the test to
// clean up through the direct DSN.
type Proxy struct {
	// DSN is the original DSN with its host and port replaced by the
	// proxy's.
	DSN string

	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool // nil once cut
	wg    sync.WaitGroup
}

// StartProxy starts a proxy to dsn's server; it is cut and its goroutines
// ended when the test ends. It skips the test for a unix-socket server or
// a DSN that is not a URL.
func StartProxy(t testing.TB, dsn string) *Proxy {
	t.Helper()
	ln, target, proxied := ProxyListen(t, dsn)
	p := &Proxy{DSN: proxied, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, target)
			}()
		}
	}()
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// ProxyListen is what a TCP proxy in front of dsn's server needs: a
// listener on 127.0.0.1, the server's address to dial, and dsn pointed at
// the listener. It skips the test for a unix-socket server or a DSN that
// is not a URL.
func ProxyListen(t testing.TB, dsn string) (ln net.Listener, target, proxied string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the server is on a unix socket (%s); the proxy speaks TCP", cfg.Host)
	}
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skip("the proxy needs a URL DSN (postgres://...)")
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	return ln, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), u.String()
}

// Cut closes the listener and every connection through the proxy.
func (p *Proxy) Cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) serve(client net.Conn, target string) {
	if !p.track(client) {
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(server) {
		_ = client.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}

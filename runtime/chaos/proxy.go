package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// proxy is a TCP proxy between the engine and Postgres that can cut every
// open connection at once, or stall them (stop forwarding, then cut).
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[*pconn]bool
	stalled bool
	closed  bool
	wg      sync.WaitGroup
	// onAnswer, if set (under mu), is called after each
	// chunk the database sends the engine is forwarded: a statement or a
	// commit of the engine's has been answered (a kill aimed at a moment
	// counts these, run.go's durable).
	onAnswer func()
}

type pconn struct{ a, b net.Conn }

func (c *pconn) close() {
	_ = c.a.Close()
	_ = c.b.Close()
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[*pconn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = a.Close()
			continue
		}
		c := &pconn{a: a, b: b}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, a, b)
		go p.pipe(c, b, a)
	}
}

// pipe copies src to dst, pausing while the proxy is stalled.
func (p *proxy) pipe(c *pconn, dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		var onAnswer func()
		for n > 0 {
			p.mu.Lock()
			stalled := p.stalled
			onAnswer = p.onAnswer
			p.mu.Unlock()
			if !stalled {
				break
			}
			time.Sleep(20 * time.Millisecond)
			if p.isGone(c) {
				return
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if dst == c.a && onAnswer != nil {
				onAnswer()
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (p *proxy) isGone(c *pconn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.conns[c]
}

// cut closes every open connection; new ones are accepted as before.
func (p *proxy) cut() int {
	p.mu.Lock()
	cs := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
	return len(cs)
}

// stall freezes forwarding on every connection (new ones too) for d, then
// cuts the connections that were open.
func (p *proxy) stall(d time.Duration, stop <-chan struct{}) {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-stop:
		t.Stop()
	}
	p.cut()
	p.mu.Lock()
	p.stalled = false
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.stalled = false
	p.mu.Unlock()
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}

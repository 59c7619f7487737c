package checkouttest

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to a target (Temporal's frontend, in the tests). Cut drops
// every connection and refuses new ones, so what dials through the proxy sees the target
// unreachable while everything else carries on; Restore lets them through again; Retarget
// moves the proxy to another target.
type Proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	cut    bool
	conns  map[net.Conn]struct{}
}

// NewProxy listens on a free loopback port and forwards to target until Close.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every open connection and every new one until Restore.
func (p *Proxy) Cut() { p.setCut(true) }

// Restore forwards new connections again.
func (p *Proxy) Restore() { p.setCut(false) }

// Retarget sends new connections to target and drops the open ones, so clients reconnect.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Cut()
	p.Restore()
}

// Close stops listening and drops every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Cut()
}

func (p *Proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			_ = c.Close()
			delete(p.conns, c)
		}
	}
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, target := p.cut, p.target
		p.mu.Unlock()
		if cut {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			_, _ = in.Close(), out.Close()
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_, _ = dst.Close(), src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

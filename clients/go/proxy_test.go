package pathlock

// A TCP proxy in front of a real server that cuts a connection right after the server has
// answered a PATHLOCK.ACQUIRE, before the client sees the reply: the grant happened, and the
// client does not know.

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

type droppingProxy struct {
	listener  net.Listener
	target    string
	dropsLeft atomic.Int64
	acquires  atomic.Int64
	dropped   atomic.Int64
	mu        sync.Mutex
	conns     []net.Conn
}

func newDroppingProxy(t testing.TB, target string, drops int) *droppingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &droppingProxy{listener: l, target: target}
	p.dropsLeft.Store(int64(drops))
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *droppingProxy) addr() string { return p.listener.Addr().String() }

func (p *droppingProxy) close() {
	_ = p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *droppingProxy) accept() {
	for {
		down, err := p.listener.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		var drop atomic.Bool
		go p.requests(down, up, &drop)
		go p.replies(up, down, &drop)
	}
}

func (p *droppingProxy) requests(down, up net.Conn, drop *atomic.Bool) {
	buf := make([]byte, 65536)
	for {
		n, err := down.Read(buf)
		if n > 0 {
			if bytes.Contains(bytes.ToUpper(buf[:n]), []byte("PATHLOCK.ACQUIRE")) {
				p.acquires.Add(1)
				if p.dropsLeft.Add(-1) >= 0 {
					drop.Store(true)
				}
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = up.Close()
	_ = down.Close()
}

func (p *droppingProxy) replies(up, down net.Conn, drop *atomic.Bool) {
	buf := make([]byte, 65536)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if drop.Load() {
				// The server has answered: the grant is made. The client never hears of it.
				p.dropped.Add(1)
				break
			}
			if _, werr := down.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = up.Close()
	_ = down.Close()
}

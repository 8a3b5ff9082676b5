package executor

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

// portPool hands out host ports from a range, never one it already gave
// to a running workload, and only ones that nothing else listens on.
type portPool struct {
	bind     string
	min, max uint16
	mu       sync.Mutex
	used     map[uint16]string // port → lease
	next     uint16
}

func newPortPool(bind string, min, max uint16) *portPool {
	return &portPool{bind: bind, min: min, max: max, used: map[uint16]string{}, next: min}
}

// take reserves n free ports for lease, or none.
func (p *portPool) take(lease string, n int) ([]uint16, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var got []uint16
	size := int(p.max) - int(p.min) + 1
	for tried := 0; tried < size && len(got) < n; tried++ {
		port := p.next
		if p.next == p.max {
			p.next = p.min
		} else {
			p.next++
		}
		if _, ok := p.used[port]; ok || !p.free(port) {
			continue
		}
		p.used[port] = lease
		got = append(got, port)
	}
	if len(got) < n {
		for _, port := range got {
			delete(p.used, port)
		}
		return nil, fmt.Errorf("%w: %d host ports wanted, the range %d-%d has %d free", ErrRefused, n, p.min, p.max, len(got))
	}
	return got, nil
}

// free reports whether nothing listens on port (TCP, on the bind address).
func (p *portPool) free(port uint16) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(p.bind, strconv.Itoa(int(port))))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// mark records ports an adopted workload holds.
func (p *portPool) mark(lease string, ports []uint16) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, port := range ports {
		p.used[port] = lease
	}
}

// release gives back every port of lease.
func (p *portPool) release(lease string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.used {
		if l == lease {
			delete(p.used, port)
		}
	}
}

// inRange reports whether port is one of the pool's.
func (p *portPool) inRange(port uint16) bool { return port >= p.min && port <= p.max }

package node

import "sync"

// A gate counts work in flight and, once shut, lets no more in: enter
// and shut take the same lock, so every wg.Add is ordered before the wait
// (a bare Add from a goroutine nobody waits for can race Wait and outlive
// it). The zero gate is open.
type gate struct {
	mu     sync.Mutex
	shut   bool
	flight sync.WaitGroup
}

// enter counts one more piece of work in flight, unless the gate is shut;
// a true answer must be matched by leave.
func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	g.flight.Add(1)
	return true
}

func (g *gate) leave() { g.flight.Done() }

// close shuts the gate and waits for the work in flight.
func (g *gate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.flight.Wait()
}

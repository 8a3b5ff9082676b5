package trade

import "sync"

// A Gate counts work in flight and, once shut, lets no more in: Enter
// and Close take the same lock, so every wg.Add is ordered before the
// wait (a bare Add from a goroutine nobody waits for can race Wait and
// outlive it). The zero Gate is open. The node's spawn uses one too.
type Gate struct {
	mu     sync.Mutex
	shut   bool
	flight sync.WaitGroup
}

// Enter counts one more piece of work in flight, unless the gate is shut;
// a true answer must be matched by Leave.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	g.flight.Add(1)
	return true
}

// Leave ends one piece of work Enter let in.
func (g *Gate) Leave() { g.flight.Done() }

// Close shuts the gate and waits for the work in flight.
func (g *Gate) Close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.flight.Wait()
}

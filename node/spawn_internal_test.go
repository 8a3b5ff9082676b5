package node

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestSpawnAfterCloseWaits: work started from goroutines Close does not
// wait for (stream handlers, the books' readers) either runs before Close's
// wait returns or not at all — never after, on a closed store.
func TestSpawnAfterCloseWaits(t *testing.T) {
	for range 50 {
		n := &Node{}
		var closed, late atomic.Int64
		var callers sync.WaitGroup
		for range 8 {
			callers.Add(1)
			go func() {
				defer callers.Done()
				for range 200 {
					n.spawn(func() {
						if closed.Load() != 0 {
							late.Add(1)
						}
					})
				}
			}()
		}
		n.spawned.Close()
		closed.Store(1)
		callers.Wait()
		if late.Load() != 0 {
			t.Fatalf("%d spawned functions ran after the wait returned", late.Load())
		}
		if n.spawn(func() {}) {
			t.Fatal("spawn after the wait started work")
		}
	}
}

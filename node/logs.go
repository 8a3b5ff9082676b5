package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
)

// DefaultLogCap is how much of a lease's workload output a buyer keeps
// (WithLogCap): the newest output is kept, the oldest dropped.
const DefaultLogCap = 16 << 20

// logPage is the most output one Logs call returns; a caller pages on
// with the view's Next while More is set.
const logPage = 1 << 20

// WithLogCap sets how many bytes of each lease's workload output this node
// stores (default DefaultLogCap). Past it the oldest chunks are deleted, so
// a provider that streams without end cannot fill the buyer's disk; Logs
// reports the gap as Dropped.
func WithLogCap(bytes int64) Option {
	return func(o *options) error {
		if bytes < 64<<10 {
			return fmt.Errorf("node: log cap %d bytes: want at least 64 KiB", bytes)
		}
		o.logCap = bytes
		return nil
	}
}

// leaseLogs keeps each lease's stored output under the cap.
type leaseLogs struct {
	limit int64
	mu    sync.Mutex
	used  map[string]int64 // lease → bytes stored; absent: not counted yet
}

// appendLog stores one chunk of r's output (kind is the exec frame: stdout
// or stderr) and trims the oldest output past the cap.
func (n *Node) appendLog(r *leaseRun, kind byte, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logSeq++
	v := append([]byte{kind}, data...)
	if err := n.store.PutLog(r.id, r.logSeq, v); err != nil {
		n.log.Warn("storing output failed", "lease", r.id, "err", err)
		return
	}
	l := &n.logs
	l.mu.Lock()
	used, ok := l.used[r.id]
	l.mu.Unlock()
	if !ok {
		var err error
		if used, err = n.store.LogBytes(r.id); err != nil {
			n.log.Warn("reading output size failed", "lease", r.id, "err", err)
			return
		}
	} else {
		used += int64(len(v))
	}
	if used > l.limit {
		// Trim to three quarters of the cap, so trimming is not paid on
		// every chunk once the cap is reached.
		freed, err := n.store.TrimLogs(r.id, used-l.limit*3/4)
		if err != nil {
			n.log.Warn("trimming output failed", "lease", r.id, "err", err)
		}
		used -= freed
	}
	l.mu.Lock()
	l.used[r.id] = used
	l.mu.Unlock()
}

// Logs implements LeaseAPI: the lease's stored output after seq after, at
// most logPage bytes a call (More: call again from Next).
func (n *Node) Logs(_ context.Context, id string, after uint64) (_ api.LogsView, err error) {
	defer classified(&err)
	r, err := n.leaseRun(id)
	if err != nil {
		return api.LogsView{}, err
	}
	v := api.LogsView{Lease: id, Chunks: []api.LogChunk{}, Next: after}
	size := 0
	err = n.store.Logs(id, after, func(seq uint64, val []byte) bool {
		if len(val) == 0 {
			return true
		}
		if size > 0 && size+len(val) > logPage {
			v.More = true
			return false
		}
		if len(v.Chunks) == 0 && seq > after+1 {
			v.Dropped = seq - after - 1
		}
		stream := "stdout"
		if val[0] == p2p.FrameStderr {
			stream = "stderr"
		}
		v.Chunks = append(v.Chunks, api.LogChunk{Seq: seq, Stream: stream, Data: string(val[1:])})
		v.Next = seq
		size += len(val)
		return true
	})
	r.mu.Lock()
	v.Exit = r.rec.Exit
	v.Done = !v.More && (r.rec.Exit != nil || (r.ml.State == market.LeaseClosed && n.now().After(r.ml.ClosedAt.Add(5*time.Second))))
	r.mu.Unlock()
	return v, err
}

package lease

import (
	"sync"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
)

// logPage is the most output one Logs call returns; a caller pages on
// with the view's Next while More is set.
const logPage = 1 << 20

// leaseLogs keeps each lease's stored output under the cap.
type leaseLogs struct {
	limit int64
	mu    sync.Mutex
	used  map[string]int64 // lease → bytes stored; absent: not counted yet
}

// appendLog stores one chunk of r's output (kind is the exec frame: stdout
// or stderr) and trims the oldest output past the cap.
func (m *Manager) appendLog(r *Run, kind byte, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logSeq++
	v := append([]byte{kind}, data...)
	if err := m.store.PutLog(r.id, r.logSeq, v); err != nil {
		m.log.Warn("storing output failed", "lease", r.id, "err", err)
		return
	}
	l := &m.logs
	l.mu.Lock()
	used, ok := l.used[r.id]
	l.mu.Unlock()
	if !ok {
		var err error
		if used, err = m.store.LogBytes(r.id); err != nil {
			m.log.Warn("reading output size failed", "lease", r.id, "err", err)
			return
		}
	} else {
		used += int64(len(v))
	}
	if used > l.limit {
		// Trim to three quarters of the cap, so trimming is not paid on
		// every chunk once the cap is reached.
		freed, err := m.store.TrimLogs(r.id, used-l.limit*3/4)
		if err != nil {
			m.log.Warn("trimming output failed", "lease", r.id, "err", err)
		}
		used -= freed
	}
	l.mu.Lock()
	l.used[r.id] = used
	l.mu.Unlock()
}

// Logs is the lease's stored output after seq after, at most logPage
// bytes a call (More: call again from Next).
func (m *Manager) Logs(id string, after uint64) (_ api.LogsView, err error) {
	r, err := m.Lookup(id)
	if err != nil {
		return api.LogsView{}, err
	}
	v := api.LogsView{Lease: id, Chunks: []api.LogChunk{}, Next: after}
	size := 0
	err = m.store.Logs(id, after, func(seq uint64, val []byte) bool {
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
	v.Done = !v.More && (r.rec.Exit != nil || (r.ml.State == market.LeaseClosed && m.now().After(r.ml.ClosedAt.Add(5*time.Second))))
	r.mu.Unlock()
	return v, err
}

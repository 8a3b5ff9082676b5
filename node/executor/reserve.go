package executor

import (
	"context"
	"sync"
	"time"
)

var (
	_ Executor  = ReserveExecutor{}
	_ Execution = (*reservation)(nil)
)

// ReserveExecutor holds the GPUs for the buyer and runs nothing: bare-metal
// style, the buyer reaches the machine by arrangement.
type ReserveExecutor struct{}

// Name implements Executor.
func (ReserveExecutor) Name() string { return Reserve }

// Start implements Executor.
func (ReserveExecutor) Start(context.Context, Workload) (Execution, error) {
	return &reservation{done: make(chan struct{}), started: time.Now()}, nil
}

type reservation struct {
	once    sync.Once
	done    chan struct{}
	started time.Time
}

func (r *reservation) Done() <-chan struct{} { return r.done }
func (r *reservation) Stop(time.Duration) error {
	r.once.Do(func() { close(r.done) })
	return nil
}
func (r *reservation) Result() ExitResult { return ExitResult{} }
func (r *reservation) Info() Info         { return Info{Executor: Reserve, Started: r.started} }

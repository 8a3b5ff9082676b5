package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/executor"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/node/internal/metrics"
	"github.com/suanli/suanli/node/internal/provider"
	"github.com/suanli/suanli/proto"
)

// The lease runtime (metering, billing, receipts, close notices, the exec
// stream, redials, workloads and their logs) is node/internal/lease. This
// file wires it: its options, its hooks into the rest of the node and
// the API methods it answers. The node's other parts reach a lease
// through the Manager's methods (node/internal/lease/others.go).

// DefaultLogCap is how much of a lease's workload output a buyer keeps
// (WithLogCap): the newest output is kept, the oldest dropped.
const DefaultLogCap = 16 << 20

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

// WithUnpaidGrace sets how long a receipt may wait for the buyer's
// countersignature before the lease ends as unpaid. Default: 3 billing
// intervals.
func WithUnpaidGrace(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return errors.New("node: negative unpaid grace")
		}
		o.unpaidGrace = d
		return nil
	}
}

// WithWithheldCountersigns makes a buyer store receipts but never
// countersign them: for tests of the unpaid path.
func WithWithheldCountersigns() Option {
	return func(o *options) error { o.withhold = true; return nil }
}

// WorkloadSpec is what a buyer's bid asks the provider to run on the
// leased GPUs (see executor.Spec). The buyer's node keeps it with the
// order and sends it over /suanli/exec/1.0.0 once the lease starts.
type WorkloadSpec = executor.Spec

// storeFailed logs and counts a failed write of what on the money path.
func (n *Node) storeFailed(what string, err error, lease string) {
	n.metrics.StoreErrors.WithLabelValues(what).Inc()
	n.log.Error("store write failed", "what", what, "lease", lease, "err", err)
}

// startLeases builds the lease runtime and takes up the stored leases.
func (n *Node) startLeases(o options) error {
	var slurm *executor.SlurmExecutor
	if o.slurm != nil {
		slurm = &executor.SlurmExecutor{Slurm: o.slurm.Slurm, Owner: n.host.ID().String(), Partition: o.slurm.Partition,
			SpotPartition: o.slurm.SpotPartition, WorkRoot: o.slurm.WorkRoot}
	}
	execs, iso, err := lease.NewExecutors(lease.ExecutorsConfig{Names: o.executors, Process: o.process, Docker: o.docker, Slurm: slurm,
		Owner: n.host.ID().String(), GPUs: n.gpus, Log: n.log})
	if err != nil {
		return err
	}
	n.isolation = iso
	n.leases = lease.New(lease.Config{
		Host: n.host, Key: n.key, Store: n.store, Clock: lease.RealClock(n.now), Log: n.log, Metrics: leaseMetrics{n.metrics},
		GPUs: n.gpus, Executors: execs, Ctx: n.ctx, Spawn: n.spawn, Grace: o.unpaidGrace, Withhold: o.withhold, LogCap: o.logCap,
		Hooks: lease.Hooks{
			CreditOthers:     n.credit.Others,
			OverCreditLocked: n.credit.Over,
			LeaseEnded:       n.leaseEnded,
			TakePayment:      n.takePayment,
			TakePreemption:   n.trade.TakePreemption,
			TakePremium:      n.resale.TakePremiumCountersign,
			TakeHandover:     n.resale.TakeHandover,
			BidWorkload:      n.orders.Workload,
			CachedOffer:      n.offers.Cached,
			Limits:           n.leaseLimits,
		},
	})
	return n.leases.Start()
}

// leaseMetrics counts the lease runtime's figures in the node's metrics.
type leaseMetrics struct{ m *metrics.Metrics }

func (l leaseMetrics) Reject(kind, reason string) { l.m.Rejects.WithLabelValues(kind, reason).Inc() }
func (l leaseMetrics) StoreError(what string)     { l.m.StoreErrors.WithLabelValues(what).Inc() }
func (l leaseMetrics) ReceiptsDropped(k int)      { l.m.LeaseReceiptsDropped.Add(float64(k)) }

// leaseLimits is what a lease of gpus GPUs may use on this provider.
func (n *Node) leaseLimits(gpus int) executor.Limits {
	p := n.perGPU.Share(provider.Count(n.gpus))
	return executor.Limits{MilliCPUs: p.MilliCPUs * int64(gpus), MemoryBytes: int64(p.RAM) * int64(gpus), DiskBytes: int64(p.Disk) * int64(gpus)}
}

// The API of leases.

// Leases implements API: every lease this node is party to, newest first.
func (n *Node) Leases(context.Context) (_ []api.LeaseView, err error) {
	defer classified(&err)
	return n.leases.Leases(), nil
}

// Lease implements API.
func (n *Node) Lease(_ context.Context, id string) (_ api.LeaseView, err error) {
	defer classified(&err)
	r, err := n.leases.Lookup(id)
	if err != nil {
		return api.LeaseView{}, err
	}
	v := r.View()
	v.Resale = n.resale.View(id)
	return v, nil
}

// CloseLease implements API: this node ends the lease early.
func (n *Node) CloseLease(ctx context.Context, id string) (_ api.LeaseView, err error) {
	defer classified(&err)
	if err := n.leases.CloseLease(id); err != nil {
		return api.LeaseView{}, err
	}
	return n.Lease(ctx, id)
}

// Logs implements LeaseAPI: the lease's stored output after seq after, a
// page a call (More: call again from Next).
func (n *Node) Logs(_ context.Context, id string, after uint64) (_ api.LogsView, err error) {
	defer classified(&err)
	return n.leases.Logs(id, after)
}

// Receipts implements API: a lease's stored chain, each signature checked.
func (n *Node) Receipts(_ context.Context, id string) ([]api.ReceiptView, error) {
	return n.leases.Receipts(id)
}

// VerifyReceipts implements API: every signature and link of a lease's
// stored chain, checked again.
func (n *Node) VerifyReceipts(_ context.Context, id string) (api.ChainReport, error) {
	return n.leases.VerifyReceipts(id)
}

// ExportReceipts implements API: a lease's signed terms (the fill's sealed
// Accept) and chain, as a proto.ReceiptChain that VerifyExport checks
// without a node.
func (n *Node) ExportReceipts(_ context.Context, id string) (_ []byte, err error) {
	defer classified(&err)
	return n.leases.Export(id)
}

// VerifyExport checks an exported chain (ExportReceipts) offline: the
// terms signed by one of the parties, every receipt signed by the
// provider, every countersignature by the buyer, and every link and
// amount.
func VerifyExport(b []byte) (api.ChainReport, error) { return leases.VerifyExport(b) }

// VerifyChain checks a chain's signatures against terms, then its links and
// amounts (market.VerifyChain).
func VerifyChain(terms *proto.Lease, chain []*proto.SignedReceipt) api.ChainReport {
	return leases.VerifyChain(terms, chain)
}

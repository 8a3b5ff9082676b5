package trade

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Take protocol timing.
const (
	// TakeTimeout is how long a taker waits for a maker before skipping it.
	TakeTimeout = 5 * time.Second
	// AcceptWindow is how long after receiving a take a maker may still
	// accept it; shorter than TakeTimeout so that an accept almost always
	// reaches a taker that is still waiting.
	AcceptWindow = 3 * time.Second
	// MaxTakeAge: a take is fresh when created no more than MaxTakeAge
	// before the maker receives it and no more than market.MaxClockSkew
	// after: the accept window plus the clock skew the market allows
	// between peers. A stale take is refused, so an answer is never
	// needed for longer than that.
	MaxTakeAge = AcceptWindow + market.MaxClockSkew
	// maxTakeRounds bounds the takes one order makes in one pass.
	maxTakeRounds = 32
)

// TakeFresh says why a take created at created is not fresh at now, or "".
func TakeFresh(created, now time.Time) string {
	return Fresh(created, now, MaxTakeAge, market.MaxClockSkew)
}

// Node is what the take protocol needs of the rest of the node: the
// offers, the provider's calendar and credit policy, the book's gossip,
// the node's own orders, its leases, and the resale and preemption
// paths. The node implements it in one wiring file (node/wire_trade.go).
// None of its methods may be called with the Trader's lock held unless
// it says so.
type Node interface {
	// AskFacts fills an ask's facts from its maker's offer (see
	// exchange.Offers); offerSeq pins the offer when not 0.
	AskFacts(ctx context.Context, o *market.Order, offerSeq uint64) error
	// OfferOf is a provider's offer.
	OfferOf(ctx context.Context, p peer.ID, minSeq uint64) (*proto.Offer, error)
	// FreeGPUs lists this provider's GPUs in mkt no lease holds now;
	// FreeGPUsFor those free for the whole block [start, end).
	FreeGPUs(mkt string) ([]string, error)
	FreeGPUsFor(mkt string, start, end time.Time) ([]string, error)
	// LeaseStart is when a trade of the bid starts; WantStart is when the
	// lease of a take by o must start, zero when now (node/calendar.go).
	LeaseStart(bid *market.Order, now time.Time) time.Time
	WantStart(o *market.Order, blockStart, now time.Time) time.Time
	// CheckCredit refuses a lease this provider would sell to a buyer
	// over its credit; CheckBidCredit the same for a bid it takes.
	CheckCredit(l *proto.Lease, now time.Time) error
	CheckBidCredit(bidID, buyer string, count uint32, price int64, currency string, d time.Duration) error
	// CapacityChanged tells the offer that GPUs were leased.
	CapacityChanged()
	// StartLease starts the lease of a fill this node is party to,
	// unless it runs already. Applying the fill starts it too, but when
	// the fill's gossip was applied first its lease may still be
	// starting on the gossip's goroutine: a take's result names the
	// lease, so it must exist when the take returns.
	StartLease(ev *p2p.BookEvent)
	// PublishBook gossips a book message of mkt.
	PublishBook(ctx context.Context, mkt string, m *proto.BookMessage, ev *p2p.BookEvent) error
	// Spawn runs fn on a goroutine Close waits for, unless closing.
	Spawn(fn func()) bool
	// Context ends when the node closes.
	Context() context.Context
	// StoreFailed logs and counts a failed write on the money path.
	StoreFailed(what string, err error, lease string)
	// TermsFailed fails lease after its terms could not be stored.
	TermsFailed(lease string, err error)
	// OwnFilled is how much of one of this node's orders has been filled;
	// OwnFailed records why a take of it failed.
	OwnFilled(order string) uint32
	OwnFailed(order string, err error)
	// Preemptible lists this provider's running spot leases in mkt not
	// yet preempted.
	Preemptible(mkt string) []market.Preemptible
	// LeaseOf is this node's role in lease id, its counterparty and terms.
	LeaseOf(id string) (role market.Role, counterparty peer.ID, terms *proto.Lease, ok bool)
	// MarkPreempted records, while lease id runs and was not preempted
	// before, that it is preempted, ending at at, with note; ok is false
	// otherwise.
	MarkPreempted(id string, at time.Time, note string) (l Preempted, ok bool)
	// HoldBlock holds a reserved block's GPUs from start to end where a
	// cluster's scheduler can (a Slurm reservation); an error refuses
	// the trade. ReleaseBlock gives the hold back when the trade fails.
	HoldBlock(ctx context.Context, lease string, gpus []string, start, end time.Time) error
	ReleaseBlock(ctx context.Context, lease string)
	// Requeue puts a preempted bid that asked for it back on the book for
	// left, what was left of its lease, for gpus, the GPUs that lease
	// held (never more than the bid asked for).
	Requeue(bidID string, gpus int, left time.Duration)
	// ResaleTake answers a take of a resale ask; ok is false when the
	// take is not of one. TakeResale is the taker's side of the reply.
	ResaleTake(ctx context.Context, from peer.ID, take *proto.Take, takeEnv []byte, takeID string) (reply *proto.TradeReply, ok bool)
	TakeResale(o *market.Order, m market.Match, takeEnv, askEnv []byte, rep *proto.ResaleReply) (uint32, error)
}

// Config is what a Trader is built from: the node's host, key, store,
// books, clock, logger and metrics, the terms it sells with, and the rest
// of the node (Node).
type Config struct {
	Host     host.Host
	Key      crypto.PrivKey
	Store    *store.Store
	Books    *exchange.Books
	Inflight *Inflight // read with the book under its lock (the node's fill hook ends a count)
	Now      func() time.Time
	Log      *slog.Logger
	// Rejects is suanli_validation_rejects_total{kind,reason}.
	Rejects *prometheus.CounterVec
	// Verified is the node's cache of checked signatures (optional): a
	// fill's take and taker order, checked when the take came, and the
	// accept this maker sealed are not verified again.
	Verified *p2p.Verified
	Node     Node

	BillingInterval time.Duration // a lease's billing interval
	PreemptNotice   time.Duration // spot leases' notice before preemption
	ChargeIncrement time.Duration // the unit leases charge GPU time in
	Schedule        []*proto.PriceWindow
	ScheduleOffset  int32
	PreemptMargin   int64 // basis points a spot trade must pay more to preempt
}

// Trader is one node's side of the take protocol, as taker (TakeLoop) and
// as maker (HandleTake). It is safe for concurrent use.
type Trader struct {
	Config
	// mu guards the choice of GPUs for a trade and the check of an
	// order's quantity against the takes in flight: held, it is never
	// held across the network, NVML, an executor, a store write or a
	// signature check. Between the choice and the store's hold, the GPUs
	// chosen are in choosing, which the next choice skips.
	mu       sync.Mutex
	choosing map[string]string // GPU UUID → the take that chose it
	seq      atomic.Uint64     // keys of this node's own takes in Inflight
	answers  Answers           // the takes answered lately
	takes    Gate              // takes being made or answered; Shut closes it
}

// New returns a Trader.
func New(c Config) *Trader {
	return &Trader{Config: c, choosing: map[string]string{}}
}

// Shut stops making and answering takes, waits for those in flight
// (their store writes with them), and runs fn (the node closing its
// store) under the trade lock.
func (t *Trader) Shut(fn func()) {
	t.takes.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	fn()
}

// chooseLocked is free without the GPUs another take is choosing. Holds mu.
func (t *Trader) chooseLocked(free []string) []string {
	out := free[:0:0]
	for _, g := range free {
		if _, busy := t.choosing[g]; !busy {
			out = append(out, g)
		}
	}
	return out
}

// holdLocked marks gpus as chosen by take id until drop. Holds mu.
func (t *Trader) holdLocked(id string, gpus []string) {
	for _, g := range gpus {
		t.choosing[g] = id
	}
}

// drop ends take id's choice of gpus: the store holds them now, or the
// take was refused.
func (t *Trader) drop(id string, gpus []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range gpus {
		if t.choosing[g] == id {
			delete(t.choosing, g)
		}
	}
}

// free lists GPUs no lease holds and no other take is choosing, for the
// block [start, start+d) when start is after now. Holds mu.
func (t *Trader) freeLocked(mkt string, start, now time.Time, d time.Duration) ([]string, error) {
	free, err := t.Node.FreeGPUs(mkt)
	if start.After(now) {
		free, err = t.Node.FreeGPUsFor(mkt, start, start.Add(d))
	}
	if err != nil {
		return nil, err
	}
	return t.chooseLocked(free), nil
}

func (t *Trader) reject(kind, reason string) {
	if t.Rejects != nil {
		t.Rejects.WithLabelValues(kind, reason).Inc()
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

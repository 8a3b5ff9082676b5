package api

import "time"

// LeaseView is a lease this node is party to.
type LeaseView struct {
	ID          string      `json:"id"`
	Role        string      `json:"role"`
	Provider    string      `json:"provider"`
	Buyer       string      `json:"buyer"`
	Market      string      `json:"market"`
	State       string      `json:"state"`
	Reason      string      `json:"reason,omitempty"`
	GPUs        []string    `json:"gpus"`
	Price       string      `json:"price"`
	Currency    string      `json:"currency"`
	PriceMicros int64       `json:"price_micros"`
	LeaseType   string      `json:"lease_type"`
	Start       time.Time   `json:"start"`
	End         time.Time   `json:"end"`
	ClosedAt    *time.Time  `json:"closed_at,omitempty"`
	Interval    string      `json:"billing_interval"`
	Executor    string      `json:"executor,omitempty"`
	Exec        []string    `json:"exec,omitempty"`
	Exit        *ExitResult `json:"exit,omitempty"`
	// Of a container workload: the image asked for and the digest that
	// ran (the repo digest, else the image ID), the container's state,
	// where its published ports are reached, and how the GPUs reach it
	// (nvidia, or env-only on simulated GPUs).
	Image          string     `json:"image,omitempty"`
	ImageDigest    string     `json:"image_digest,omitempty"`
	ContainerState string     `json:"container_state,omitempty"`
	Endpoints      []Endpoint `json:"endpoints,omitempty"`
	GPUAccess      string     `json:"gpu_access,omitempty"`
	// PreemptAt is when a preempted spot lease ends (its notice's end).
	PreemptAt     *time.Time `json:"preempt_at,omitempty"`
	Receipts      uint64     `json:"receipts"`
	Countersigned uint64     `json:"countersigned"`
	Cumulative    string     `json:"cumulative"`
	Note          string     `json:"note,omitempty"`
	// Resale is the lease's resale, when it was resold or bought by
	// resale.
	Resale *ResaleView `json:"resale,omitempty"`
}

// LogsView is a lease's output after a seq.
type LogsView struct {
	Lease  string      `json:"lease"`
	Chunks []LogChunk  `json:"chunks"`
	Next   uint64      `json:"next"` // pass as after to follow
	Done   bool        `json:"done"` // no more will come
	Exit   *ExitResult `json:"exit,omitempty"`
	// More: this page stopped at its size limit; call again from Next.
	More bool `json:"more,omitempty"`
	// Dropped is how many chunks after the asked seq were deleted under
	// the node's log cap before this call (the oldest output goes first).
	Dropped uint64 `json:"dropped,omitempty"`
}

// LogChunk is a piece of a lease's captured output.
type LogChunk struct {
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"` // stdout or stderr
	Data   string `json:"data"`
}

// ReceiptView is one receipt of a lease's chain.
type ReceiptView struct {
	Seq               uint64    `json:"seq"`
	WindowStart       time.Time `json:"window_start"`
	WindowEnd         time.Time `json:"window_end"`
	GPUMillis         uint64    `json:"gpu_ms"`
	Utilization       []uint32  `json:"utilization_permille"`
	Amount            string    `json:"amount"`
	Cumulative        string    `json:"cumulative"`
	AmountMicros      int64     `json:"amount_micros"`
	CumulativeMicros  int64     `json:"cumulative_micros"`
	Hash              string    `json:"hash"`
	ProviderSignature string    `json:"provider_signature"` // valid or invalid
	BuyerSignature    string    `json:"buyer_signature"`    // valid, invalid or missing
}

// ChainReport is the result of re-verifying a lease's receipt chain.
type ChainReport struct {
	Lease         string `json:"lease"`
	Provider      string `json:"provider"`
	Buyer         string `json:"buyer"`
	Receipts      uint64 `json:"receipts"`
	Countersigned uint64 `json:"countersigned"`
	GPUMillis     uint64 `json:"gpu_ms"`
	Owed          string `json:"owed"`
	OwedMicros    int64  `json:"owed_micros"`
	Currency      string `json:"currency"`
	Valid         bool   `json:"valid"`
	Error         string `json:"error,omitempty"`
}

// SettlementView is the node's settlement with one peer, from countersigned
// receipts and acknowledged payments (market.Ledger).
type SettlementView struct {
	Peer     string            `json:"peer"`
	Leases   []LeaseSettlement `json:"leases"`
	Payments []PaymentView     `json:"payments"`
	Totals   []TotalView       `json:"totals"`
	// Credit is what the peer may still run up with this provider, when
	// it bought from it or prepaid (see credit.go).
	Credit []CreditView `json:"credit,omitempty"`
}

// LeaseSettlement is one lease in a settlement.
type LeaseSettlement struct {
	Lease string `json:"lease"`
	// Kind is "lease" for a lease's receipts, or "resale premium" for
	// what the buyer of a resold lease (Lease) owes its holder on top of
	// the provider's receipts (role provider: this node is owed it).
	Kind         string `json:"kind"`
	Role         string `json:"role"`
	Currency     string `json:"currency"`
	Receipts     uint64 `json:"receipts"`
	GPUMillis    uint64 `json:"gpu_ms"`
	Amount       string `json:"amount"` // countersigned cumulative
	AmountMicros int64  `json:"amount_micros"`
	Paid         string `json:"paid"`
	Owed         string `json:"owed"`
	OwedMicros   int64  `json:"owed_micros"`
}

// TotalView is a settlement's total in one currency. Owed is what the peer
// owes this node; negative when this node owes the peer.
type TotalView struct {
	Currency   string `json:"currency"`
	Receivable string `json:"receivable"`
	Received   string `json:"received"`
	Payable    string `json:"payable"`
	Paid       string `json:"paid"`
	Owed       string `json:"owed"`
	OwedMicros int64  `json:"owed_micros"`
}

// PaymentRequest is a provider's acknowledgement that a buyer paid it.
type PaymentRequest struct {
	Peer      string `json:"peer"`
	Amount    string `json:"amount"` // decimal in Currency
	Currency  string `json:"currency,omitempty"`
	Reference string `json:"reference,omitempty"`
}

// PaymentView is an acknowledged payment.
type PaymentView struct {
	Role      string    `json:"role"` // provider: the peer paid this node
	Seq       uint64    `json:"seq"`
	Amount    string    `json:"amount"`
	Currency  string    `json:"currency"`
	Created   time.Time `json:"created"`
	Reference string    `json:"reference,omitempty"`
	Delivered *bool     `json:"delivered,omitempty"`
}

// EvidenceView is one piece of evidence this node keeps.
type EvidenceView struct {
	// ID names it for ExportEvidence: "receipt/<lease>/<seq>" or "fill/<fill id>".
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Peers are who signed it: the provider of an equivocation, both
	// parties of a refused fill.
	Peers  []string  `json:"peers"`
	Lease  string    `json:"lease,omitempty"`
	Seq    uint64    `json:"seq,omitempty"`
	Fill   string    `json:"fill,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// EvidenceReport is what VerifyEvidence proves.
type EvidenceReport struct {
	Kind   string   `json:"kind"`
	Peers  []string `json:"peers"`
	Proves string   `json:"proves"`
}

// ExitResult is how a lease's workload ended (node/executor reports it).
type ExitResult struct {
	// Detached: the workload did not end; the daemon stopped watching it.
	Detached  bool   `json:"detached,omitempty"`
	Code      int    `json:"code"`                 // exit code; -1 when killed by a signal or never run
	Signal    string `json:"signal,omitempty"`     // the signal that killed it
	OOMKilled bool   `json:"oom_killed,omitempty"` // the kernel killed it for memory
	Error     string `json:"error,omitempty"`      // why it could not run or be watched, if so
}

// Endpoint is where a published container port of a lease is reached.
type Endpoint struct {
	ContainerPort uint16 `json:"container_port"`
	Host          string `json:"host"`
	HostPort      uint16 `json:"host_port"`
}

// ResaleView is a lease's resale, on the lease's view: the holder's (role
// seller) and the new buyer's (role buyer) from the same record signed by
// both, the provider's from the handover it took.
type ResaleView struct {
	Role          string    `json:"role"` // seller, buyer or provider
	Lease         string    `json:"lease"`
	NewLease      string    `json:"new_lease"`
	Holder        string    `json:"holder"`
	Buyer         string    `json:"buyer"`
	From          time.Time `json:"from"`
	End           time.Time `json:"end"`
	GPUs          uint32    `json:"gpus,omitempty"`
	LeasePrice    string    `json:"lease_price,omitempty"`
	ResalePrice   string    `json:"resale_price,omitempty"`
	Premium       string    `json:"premium,omitempty"` // positive: the buyer pays the holder
	PremiumMicros int64     `json:"premium_micros"`
	Currency      string    `json:"currency"`
	Countersigned bool      `json:"countersigned"` // by the new buyer
	// Record is the stored proto.SignedPremium, the same bytes on both
	// sides once countersigned.
	Record []byte `json:"record,omitempty"`
}

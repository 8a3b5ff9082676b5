package api

import "time"

// OfferQuery is a buyer's search. Zero fields do not filter.
type OfferQuery struct {
	GPU        string `json:"gpu,omitempty"`
	MinGPUs    int    `json:"min_gpus,omitempty"`
	MinVRAMGiB uint64 `json:"min_vram_gib,omitempty"`
	Region     string `json:"region,omitempty"`
	// MaxPrice is a decimal per GPU-hour in Currency (default USD).
	MaxPrice   string `json:"max_price,omitempty"`
	Currency   string `json:"currency,omitempty"`
	CCAttested bool   `json:"cc_attested,omitempty"`
	// MinVCPUsPerGPU and MinRAMGiBPerGPU ask for at least this much CPU
	// and RAM with each GPU (as the offer states; containers get it).
	MinVCPUsPerGPU  uint64 `json:"min_vcpus_per_gpu,omitempty"`
	MinRAMGiBPerGPU uint64 `json:"min_ram_gib_per_gpu,omitempty"`
	// Sort is price (default), vram or gpus.
	Sort string `json:"sort,omitempty"`
	// MinFreeGPUs keeps offers with at least this many matching GPUs free
	// (not leased) now.
	MinFreeGPUs int `json:"min_free_gpus,omitempty"`
	// MinIsolation keeps offers whose isolation level is at least this
	// (process, container, container-userns).
	MinIsolation string `json:"min_isolation,omitempty"`
	// From says where the offers come from: "" (default) the DHT's
	// providers of the market, merged with the offers that back the open
	// asks of a market book this node replicates; "dht" the DHT only;
	// "book" the book only (OffersFromBook): no DHT value lookup, the node
	// joins the market's book (GPU must then be a full market key).
	From string `json:"from,omitempty"`
}

// Where offers come from (OfferQuery.From).
const (
	OffersFromDHT  = "dht"
	OffersFromBook = "book"
)

// OfferView is an offer as a buyer sees it. Money is a decimal string beside
// its currency, never a float.
type OfferView struct {
	Provider    string `json:"provider"`
	Region      string `json:"region"`
	Price       string `json:"price"`
	Currency    string `json:"currency"`
	SpotFloor   string `json:"spot_floor,omitempty"`
	Attestation string `json:"attestation"`
	// Isolation is the provider's isolation level (IsolationNone, …; ""
	// when its offer does not say).
	Isolation string `json:"isolation,omitempty"`
	// Scheduler names the workload scheduler that places the provider's
	// leases ("slurm"; "" for a single machine), and MaxNodes how many of
	// its nodes one lease's GPUs may span.
	Scheduler string    `json:"scheduler,omitempty"`
	MaxNodes  uint32    `json:"max_nodes,omitempty"`
	Seq       uint64    `json:"seq"`
	Expires   time.Time `json:"expires"`
	Addrs     []string  `json:"addrs,omitempty"`
	// Matching is how many of the GPUs pass the query's GPU and memory filters.
	Matching int          `json:"matching_gpus"`
	GPUs     []GPUSummary `json:"gpus"`
	Terms    TermsView    `json:"terms"`
	// FreeGPUs is how many of the matching GPUs are free now; Capacity is
	// per market, with when the leased ones free up (see capacity.go).
	FreeGPUs int            `json:"free_gpus"`
	Capacity []CapacityView `json:"capacity"`
	// PerGPU is what each leased GPU comes with.
	PerGPU PerGPUView `json:"per_gpu"`
	// With a time-of-day schedule: the on-demand price now, and the next
	// one and when it starts.
	PriceNow    string     `json:"price_now,omitempty"`
	NextPrice   string     `json:"next_price,omitempty"`
	NextPriceAt *time.Time `json:"next_price_at,omitempty"`
}

// PerGPUView is the CPU, RAM and disk an offer sells with each GPU; zero:
// not stated.
type PerGPUView struct {
	MilliCPUs uint64 `json:"milli_cpus"`
	RAMBytes  uint64 `json:"ram_bytes"`
	DiskBytes uint64 `json:"disk_bytes"`
}

// GPUSummary is one offered GPU.
type GPUSummary struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	Market      string `json:"market"`
	MemoryBytes uint64 `json:"memory_bytes"`
	Evidence    bool   `json:"evidence,omitempty"`
	// Node is the scheduler's node holding the GPU (a scheduler's offer).
	Node string `json:"node,omitempty"`
	// LeasedUntil is when the lease holding the GPU ends; nil when free.
	LeasedUntil *time.Time `json:"leased_until,omitempty"`
}

// TermsView are an offer's lease terms in seconds.
type TermsView struct {
	MinDurationS      int64 `json:"min_duration_s"`
	MaxDurationS      int64 `json:"max_duration_s"`
	BillingIncrementS int64 `json:"billing_increment_s"` // how often receipts come
	// ChargeIncrementS is the unit GPU time is charged in: 0 (to the
	// millisecond), 1, 60 or 3600, every started unit in full.
	ChargeIncrementS int64 `json:"charge_increment_s,omitempty"`
}

// CapacityView is an offer's GPUs in one market: how many, how many free
// now, and when the leased ones free up.
type CapacityView struct {
	Market   string        `json:"market"`
	Total    int           `json:"total"`
	Free     int           `json:"free"`
	Releases []ReleaseView `json:"releases,omitempty"`
}

// ReleaseView is a number of leased GPUs that free up at one time.
type ReleaseView struct {
	At    time.Time `json:"at"`
	Count int       `json:"count"`
}

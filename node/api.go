package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
)

// API is what a running node answers. Node implements it in-process and
// Client over the daemon's local HTTP API; one test suite checks both.
type API interface {
	// ID is the node's peer ID and listen addresses.
	ID(ctx context.Context) (IDInfo, error)
	// GPUs is the local inventory the node offers, with fresh telemetry.
	GPUs(ctx context.Context) (GPUReport, error)
	// Offers searches the network for offers passing the query.
	Offers(ctx context.Context, q OfferQuery) ([]OfferView, error)
	// Peers lists connected peers.
	Peers(ctx context.Context) ([]PeerView, error)

	// PlaceOrder signs and places a bid or ask, taking what it crosses.
	PlaceOrder(ctx context.Context, req OrderRequest) (OrderView, error)
	// Order is one of this node's orders and its fills.
	Order(ctx context.Context, id string) (OrderView, error)
	// Orders lists this node's orders, newest first.
	Orders(ctx context.Context) ([]OrderView, error)
	// CancelOrder withdraws one of this node's resting orders.
	CancelOrder(ctx context.Context, id string) (OrderView, error)
	// Book is a market's depth, spread, spot price and index in a currency.
	Book(ctx context.Context, market, currency string) (BookView, error)
	// Trades are a market's recent fills, newest first.
	Trades(ctx context.Context, market string) ([]TradeView, error)

	// Attest challenges a provider to prove its GPUs with fresh
	// confidential-computing evidence, and verifies the answer.
	Attest(ctx context.Context, provider peer.ID) (AttestReport, error)

	// Leases and settlement (see LeaseAPI).
	LeaseAPI
	// Price history, GPU telemetry over time, paged orders (see DashboardAPI).
	DashboardAPI
}

// IDInfo identifies a node. Addrs are full multiaddrs ending in /p2p/<id>.
type IDInfo struct {
	ID       string   `json:"id"`
	Addrs    []string `json:"addrs"`
	Provider bool     `json:"provider"`
	// NoGPUReason says why the node is not a provider, when it is not.
	NoGPUReason string `json:"no_gpu_reason,omitempty"`
}

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
}

// filter turns the query into the market's filter, refusing bad input.
func (q OfferQuery) filter() (market.OfferFilter, error) {
	f := market.OfferFilter{
		GPU:            q.GPU,
		MinGPUs:        q.MinGPUs,
		MinMemoryBytes: q.MinVRAMGiB << 30,
		Region:         q.Region,
		CCAttested:     q.CCAttested,

		MinMilliCPUsPerGPU: q.MinVCPUsPerGPU * 1000,
		MinRAMBytesPerGPU:  q.MinRAMGiBPerGPU << 30,
		MinFreeGPUs:        q.MinFreeGPUs,
	}
	if q.MinGPUs < 0 || q.MinFreeGPUs < 0 {
		return f, badRequest("min-gpus and min-free must not be negative")
	}
	if q.MaxPrice != "" {
		cur := q.Currency
		if cur == "" {
			cur = "USD"
		}
		m, err := market.ParseMoney(q.MaxPrice, cur)
		if err != nil {
			return f, badRequest("max-price: %v", err)
		}
		f.MaxPrice = &m
	}
	if q.Sort != "" {
		if err := market.SortOffers(nil, q.Sort); err != nil {
			return f, badRequest("%v", err)
		}
	}
	return f, nil
}

// OfferView is an offer as a buyer sees it. Money is a decimal string beside
// its currency, never a float.
type OfferView struct {
	Provider    string    `json:"provider"`
	Region      string    `json:"region"`
	Price       string    `json:"price"`
	Currency    string    `json:"currency"`
	SpotFloor   string    `json:"spot_floor,omitempty"`
	Attestation string    `json:"attestation"`
	Seq         uint64    `json:"seq"`
	Expires     time.Time `json:"expires"`
	Addrs       []string  `json:"addrs,omitempty"`
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

func offerView(o *proto.Offer, f market.OfferFilter) OfferView {
	p, _ := peer.IDFromBytes(o.Provider)
	v := OfferView{
		Provider:    p.String(),
		Region:      o.Region,
		Price:       market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
		Currency:    o.GetPricing().GetCurrency(),
		Attestation: attestationName(o.Attestation),
		Seq:         o.Seq,
		Expires:     time.UnixMilli(o.ExpiresUnixMs).UTC(),
		Addrs:       o.Addrs,
		Matching:    f.MatchingGPUs(o),
		Terms: TermsView{
			MinDurationS:      o.GetTerms().GetMinDurationS(),
			MaxDurationS:      o.GetTerms().GetMaxDurationS(),
			BillingIncrementS: o.GetTerms().GetBillingIncrementS(),
			ChargeIncrementS:  o.GetTerms().GetChargeIncrementS(),
		},
		PerGPU: PerGPUView{MilliCPUs: o.GetHost().GetMilliCpusPerGpu(), RAMBytes: o.GetHost().GetMemoryBytesPerGpu(),
			DiskBytes: o.GetHost().GetDiskBytesPerGpu()},
	}
	if p := o.GetPricing(); len(p.GetSchedule()) > 0 {
		now := time.Now()
		v.PriceNow = market.FormatMicros(market.ScheduledPrice(p.OnDemandMicros, p.Schedule, p.UtcOffsetMinutes, now), p.Currency)
		if at, price, ok := market.NextPriceChange(p.OnDemandMicros, p.Schedule, p.UtcOffsetMinutes, now); ok {
			v.NextPrice, v.NextPriceAt = market.FormatMicros(price, p.Currency), &at
		}
	}
	if sf := o.GetPricing().GetSpotFloorMicros(); sf > 0 {
		v.SpotFloor = market.FormatMicros(sf, v.Currency)
	}
	for _, g := range o.Gpus {
		v.GPUs = append(v.GPUs, GPUSummary{UUID: g.Uuid, Name: g.Name, Market: g.Market, MemoryBytes: g.MemoryBytes, Evidence: g.Evidence != nil})
	}
	return v
}

func attestationName(l proto.AttestationLevel) string {
	switch l {
	case proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE:
		return string(gpu.CCEvidence)
	case proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED:
		return string(gpu.SelfReported)
	}
	return "unknown"
}

// GPUReport is the local inventory with one telemetry sample per GPU.
type GPUReport struct {
	Backend               string      `json:"backend"`
	DriverVersion         string      `json:"driver_version"`
	CUDADriverVersion     string      `json:"cuda_driver_version"`
	NVMLVersion           string      `json:"nvml_version"`
	ConfidentialComputing bool        `json:"confidential_computing"`
	Attestation           string      `json:"attestation"`
	GPUs                  []GPUDetail `json:"gpus"`
}

// GPUDetail is one local GPU.
type GPUDetail struct {
	Index                int    `json:"index"`
	UUID                 string `json:"uuid"`
	Name                 string `json:"name"`
	Market               string `json:"market"`
	MemoryBytes          uint64 `json:"memory_bytes"`
	PCIBusID             string `json:"pci_bus_id"`
	ComputeCapability    string `json:"compute_capability"`
	Architecture         string `json:"architecture,omitempty"`
	Serial               string `json:"serial,omitempty"`
	PowerLimitMilliwatts uint32 `json:"power_limit_mw,omitempty"`
	ECC                  string `json:"ecc,omitempty"`
	MIGEnabled           bool   `json:"mig_enabled"`
	// EvidenceReportSHA256 names the attestation report, when there is one.
	EvidenceReportSHA256 string         `json:"evidence_report_sha256,omitempty"`
	Telemetry            *gpu.Telemetry `json:"telemetry,omitempty"`
}

// InventoryReport describes a backend's inventory with one telemetry
// sample, for `suanli gpus` and the API.
func InventoryReport(b gpu.Backend) (GPUReport, error) {
	inv, err := b.Inventory()
	if err != nil {
		return GPUReport{}, err
	}
	tel, _ := b.Telemetry() // telemetry is best effort; the inventory is the claim
	byUUID := map[string]*gpu.Telemetry{}
	for i := range tel {
		byUUID[tel[i].UUID] = &tel[i]
	}
	r := GPUReport{
		Backend:               inv.Backend,
		DriverVersion:         inv.DriverVersion,
		CUDADriverVersion:     inv.CUDADriverVersion,
		NVMLVersion:           inv.NVMLVersion,
		ConfidentialComputing: inv.ConfidentialComputing,
		Attestation:           string(inv.Level()),
		GPUs:                  []GPUDetail{},
	}
	for _, d := range inv.Devices {
		g := GPUDetail{
			Index: d.Index, UUID: d.UUID, Name: d.Name, Market: d.Market, MemoryBytes: d.MemoryBytes,
			PCIBusID: d.PCIBusID, ComputeCapability: d.ComputeCapability, Architecture: d.Architecture,
			Serial: d.Serial, PowerLimitMilliwatts: d.PowerLimitMilliwatts, ECC: d.ECC, MIGEnabled: d.MIGEnabled,
			Telemetry: byUUID[d.UUID],
		}
		if d.Evidence != nil {
			sum := sha256.Sum256(d.Evidence.Report)
			g.EvidenceReportSHA256 = hex.EncodeToString(sum[:])
		}
		r.GPUs = append(r.GPUs, g)
	}
	return r, nil
}

// PeerView is one connected peer.
type PeerView struct {
	ID    string   `json:"id"`
	Addrs []string `json:"addrs"`
}

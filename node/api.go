package node

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/proto"
)

// offerFilter turns the query into the market's filter, refusing bad input.
func offerFilter(q api.OfferQuery) (market.OfferFilter, error) {
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
	if q.MinIsolation != "" && !slices.Contains(lease.IsolationLevels[1:], q.MinIsolation) {
		return f, api.BadRequest("min_isolation %q: want process, container or container-userns", q.MinIsolation)
	}
	if q.MinGPUs < 0 || q.MinFreeGPUs < 0 {
		return f, api.BadRequest("min-gpus and min-free must not be negative")
	}
	if q.MaxPrice != "" {
		cur := q.Currency
		if cur == "" {
			cur = "USD"
		}
		m, err := market.ParseMoney(q.MaxPrice, cur)
		if err != nil {
			return f, api.BadRequest("max-price: %v", err)
		}
		f.MaxPrice = &m
	}
	if q.Sort != "" {
		if err := market.SortOffers(nil, q.Sort); err != nil {
			return f, api.BadRequest("%v", err)
		}
	}
	return f, nil
}

func offerView(o *proto.Offer, f market.OfferFilter) api.OfferView {
	p, _ := peer.IDFromBytes(o.Provider)
	v := api.OfferView{
		Provider:    p.String(),
		Region:      o.Region,
		Price:       market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
		Currency:    o.GetPricing().GetCurrency(),
		Attestation: attestationName(o.Attestation),
		Isolation:   lease.IsolationName(o.Isolation),
		Scheduler:   o.Scheduler,
		MaxNodes:    o.MaxNodes,
		Seq:         o.Seq,
		Expires:     time.UnixMilli(o.ExpiresUnixMs).UTC(),
		Addrs:       o.Addrs,
		Matching:    f.MatchingGPUs(o),
		Terms: api.TermsView{
			MinDurationS:      o.GetTerms().GetMinDurationS(),
			MaxDurationS:      o.GetTerms().GetMaxDurationS(),
			BillingIncrementS: o.GetTerms().GetBillingIncrementS(),
			ChargeIncrementS:  o.GetTerms().GetChargeIncrementS(),
		},
		PerGPU: api.PerGPUView{MilliCPUs: o.GetHost().GetMilliCpusPerGpu(), RAMBytes: o.GetHost().GetMemoryBytesPerGpu(),
			DiskBytes: o.GetHost().GetDiskBytesPerGpu()},
	}
	if p := o.GetPricing(); len(p.GetSchedule()) > 0 {
		now := f.Now // the node's clock (Offers sets it)
		if now.IsZero() {
			now = time.Now()
		}
		v.PriceNow = market.FormatMicros(market.ScheduledPrice(p.OnDemandMicros, p.Schedule, p.UtcOffsetMinutes, now), p.Currency)
		if at, price, ok := market.NextPriceChange(p.OnDemandMicros, p.Schedule, p.UtcOffsetMinutes, now); ok {
			v.NextPrice, v.NextPriceAt = market.FormatMicros(price, p.Currency), &at
		}
	}
	if sf := o.GetPricing().GetSpotFloorMicros(); sf > 0 {
		v.SpotFloor = market.FormatMicros(sf, v.Currency)
	}
	for _, g := range o.Gpus {
		v.GPUs = append(v.GPUs, api.GPUSummary{UUID: g.Uuid, Name: g.Name, Market: g.Market, MemoryBytes: g.MemoryBytes, Evidence: g.Evidence != nil, Node: g.Node})
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

// InventoryReport describes a backend's inventory with one telemetry
// sample, for `suanli gpus` and the API.
func InventoryReport(b gpu.Backend) (api.GPUReport, error) {
	inv, err := b.Inventory()
	if err != nil {
		return api.GPUReport{}, err
	}
	tel, _ := b.Telemetry() // telemetry is best effort; the inventory is the claim
	byUUID := map[string]*api.Telemetry{}
	for i := range tel {
		t := api.Telemetry(tel[i])
		byUUID[t.UUID] = &t
	}
	r := api.GPUReport{
		Backend:               inv.Backend,
		DriverVersion:         inv.DriverVersion,
		CUDADriverVersion:     inv.CUDADriverVersion,
		NVMLVersion:           inv.NVMLVersion,
		ConfidentialComputing: inv.ConfidentialComputing,
		Attestation:           string(inv.Level()),
		GPUs:                  []api.GPUDetail{},
	}
	for _, d := range inv.Devices {
		g := api.GPUDetail{
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

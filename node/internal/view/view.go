// Package view builds what the local API shows (node/api's views) of the
// market's and the wire's objects: offers and the filter a query makes,
// a GPU inventory, a book replica, a settlement statement, the status
// summary. It holds no state and does no I/O; the node reads what it
// shows and calls here.
package view

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/proto"
)

// OfferFilter turns the query into the market's filter, refusing bad input.
func OfferFilter(q api.OfferQuery) (market.OfferFilter, error) {
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

// Offer is what the API shows of an offer, its GPUs matching f counted.
func Offer(o *proto.Offer, f market.OfferFilter) api.OfferView {
	p, _ := peer.IDFromBytes(o.Provider)
	v := api.OfferView{
		Provider:    p.String(),
		Region:      o.Region,
		Price:       market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
		Currency:    o.GetPricing().GetCurrency(),
		Attestation: AttestationName(o.Attestation),
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

// AttestationName is an attestation level as the API names it.
func AttestationName(l proto.AttestationLevel) string {
	switch l {
	case proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE:
		return string(gpu.CCEvidence)
	case proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED:
		return string(gpu.SelfReported)
	}
	return "unknown"
}

// Inventory describes a backend's inventory with one telemetry sample.
func Inventory(b gpu.Backend) (api.GPUReport, error) {
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

// Book is what the API shows of the replica s of mkt in currency cur at
// now: its depth, best prices, spot, index and future blocks. Holds the
// books lock (exchange.Books.With).
func Book(s *exchange.Replica, mkt, cur string, now time.Time) api.BookView {
	f := func(p int64) string { return market.FormatMicros(p, cur) }
	v := api.BookView{Market: mkt, Currency: cur, Bids: []api.LevelView{}, Asks: []api.LevelView{}}
	for _, side := range []market.Side{market.Bid, market.Ask} {
		for o, rem := range s.Book.Orders(side) {
			if o.Start.After(now) {
				b := api.BlockView{Side: side.String(), Price: f(o.Price), Count: rem, Start: o.Start.UTC()}
				if side == market.Bid {
					b.Duration = o.Duration.String()
				} else {
					b.MaxDuration = o.MaxDuration.String()
				}
				v.Blocks = append(v.Blocks, b)
			}
		}
	}
	bids, asks := s.Book.Depth(0)
	for _, l := range bids {
		v.Bids = append(v.Bids, api.LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
	}
	for _, l := range asks {
		v.Asks = append(v.Asks, api.LevelView{Price: f(l.Price), Count: l.Quantity, Orders: l.Orders})
	}
	if p, ok := s.Book.BestBid(); ok {
		v.BestBid = f(p)
	}
	if p, ok := s.Book.BestAsk(); ok {
		v.BestAsk = f(p)
	}
	if p, ok := s.Book.Spread(); ok {
		v.Spread = f(p)
	}
	if p, ok := s.Book.Spot(); ok {
		v.Spot = f(p)
	}
	if p, ok := s.Index.Value(now); ok {
		v.Index = f(p)
	}
	return v
}

// Settlement is what the API shows of a statement, and the currencies
// the peer bought in from this node (whose credit it shows).
func Settlement(st market.Statement) (v api.SettlementView, bought []string) {
	v = api.SettlementView{Peer: peer.ID(st.Peer).String(), Leases: []api.LeaseSettlement{}, Payments: []api.PaymentView{}, Totals: []api.TotalView{}}
	for _, ls := range st.Leases {
		kind := "lease"
		if ls.Premium {
			kind = "resale premium"
		}
		v.Leases = append(v.Leases, api.LeaseSettlement{
			Lease: ls.LeaseID, Kind: kind, Role: ls.Role.String(), Currency: ls.Currency, Receipts: ls.Receipts, GPUMillis: ls.GPUMillis,
			Amount: market.FormatMicros(ls.Countersigned, ls.Currency), AmountMicros: ls.Countersigned,
			Paid: market.FormatMicros(ls.Paid, ls.Currency), Owed: market.FormatMicros(ls.Owed, ls.Currency), OwedMicros: ls.Owed,
		})
	}
	for _, pm := range st.Payments {
		v.Payments = append(v.Payments, api.PaymentView{Role: pm.Role.String(), Seq: pm.Seq, Amount: market.FormatMicros(pm.Amount.Micros, pm.Amount.Currency),
			Currency: pm.Amount.Currency, Created: pm.Created, Reference: pm.Reference})
	}
	for _, t := range st.Totals {
		if t.Receivable > 0 || t.Received > 0 {
			bought = append(bought, t.Currency)
		}
		f := func(m int64) string { return market.FormatMicros(m, t.Currency) }
		v.Totals = append(v.Totals, api.TotalView{Currency: t.Currency, Receivable: f(t.Receivable), Received: f(t.Received),
			Payable: f(t.Payable), Paid: f(t.Paid), Owed: f(t.Owed), OwedMicros: t.Owed})
	}
	return v, bought
}

// Status fills v with the node's published offer o (nil: none) and the
// counts of its orders, leases and what is owed in each currency.
func Status(v *api.StatusView, o *proto.Offer, orders []api.OrderView, leases []api.LeaseView, settle []api.SettlementView) {
	if o != nil {
		v.Offer = &api.PublishedOffer{Seq: o.Seq, GPUs: len(o.Gpus), Region: o.Region, Currency: o.GetPricing().GetCurrency(),
			Price:   market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
			Expires: time.UnixMilli(o.ExpiresUnixMs).UTC()}
	}
	v.Orders = len(orders)
	for _, o := range orders {
		if o.Status == "resting" {
			v.OpenOrders++
		}
	}
	v.Leases = len(leases)
	for _, l := range leases {
		if l.State == "running" {
			v.RunningLeases++
		}
	}
	owed := map[string]int64{}
	for _, s := range settle {
		for _, t := range s.Totals {
			owed[t.Currency] += t.OwedMicros
		}
	}
	for cur, micros := range owed {
		v.Owed = append(v.Owed, api.OwedView{Currency: cur, Owed: market.FormatMicros(micros, cur), OwedMicros: micros})
	}
	slices.SortFunc(v.Owed, func(a, b api.OwedView) int { return strings.Compare(a.Currency, b.Currency) })
}

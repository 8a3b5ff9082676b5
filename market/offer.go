package market

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/suanli/suanli/proto"
)

// Offer bounds.
const (
	// MaxOfferTTL is the furthest ahead an offer may expire. Providers
	// republish well before expiry, so a long-lived stale offer cannot linger.
	MaxOfferTTL = 24 * time.Hour
	// MaxClockSkew is how far in the future an offer's creation time may lie.
	MaxClockSkew = 5 * time.Minute
	// MaxOfferGPUs is the most GPUs one offer may list.
	MaxOfferGPUs = 64
	// MaxPriceMicros bounds any price per GPU-hour (one million units).
	MaxPriceMicros = 1_000_000 * MicrosPerUnit
)

// Reasons an offer is refused. Each is returned wrapped with detail; use
// errors.Is to tell them apart and Reason for a metrics label.
var (
	ErrOfferExpired    = errors.New("market: offer expired")
	ErrOfferFarFuture  = errors.New("market: offer expiry too far ahead")
	ErrOfferFromFuture = errors.New("market: offer created in the future")
	ErrOfferSchema     = errors.New("market: offer malformed")
	ErrOfferPrice      = errors.New("market: offer price out of bounds")
	ErrOfferEvidence   = errors.New("market: offer evidence inconsistent")
)

var (
	marketKeyRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	regionRE    = regexp.MustCompile(`^[A-Z]{2}(-[A-Z0-9]{1,8}){0,2}$`)
)

// ValidMarketKey reports whether s is a well-formed market key such as
// "nvidia-h100-sxm5-80gb".
func ValidMarketKey(s string) bool { return len(s) <= 64 && marketKeyRE.MatchString(s) }

// ValidRegion reports whether s is a region code such as "CN-GZ" or "US-CA".
func ValidRegion(s string) bool { return regionRE.MatchString(s) }

// ValidateOffer checks everything about an offer that does not need its
// signature: times against now, schema, prices, terms and evidence indices.
// The signature and signer are the p2p layer's job.
func ValidateOffer(o *proto.Offer, now time.Time) error {
	if o == nil {
		return fmt.Errorf("%w: empty", ErrOfferSchema)
	}
	created := time.UnixMilli(o.CreatedUnixMs)
	expires := time.UnixMilli(o.ExpiresUnixMs)
	switch {
	case !expires.After(now):
		return fmt.Errorf("%w at %s", ErrOfferExpired, expires.UTC().Format(time.RFC3339))
	case expires.Sub(now) > MaxOfferTTL:
		return fmt.Errorf("%w: %s ahead, limit %s", ErrOfferFarFuture, expires.Sub(now).Round(time.Second), MaxOfferTTL)
	case created.Sub(now) > MaxClockSkew:
		return fmt.Errorf("%w: %s ahead", ErrOfferFromFuture, created.Sub(now).Round(time.Second))
	case !expires.After(created):
		return fmt.Errorf("%w: expires before it is created", ErrOfferSchema)
	case o.Seq == 0:
		return fmt.Errorf("%w: seq 0", ErrOfferSchema)
	case !ValidRegion(o.Region):
		return fmt.Errorf("%w: region %q (want e.g. CN-GZ)", ErrOfferSchema, o.Region)
	case len(o.Gpus) == 0 || len(o.Gpus) > MaxOfferGPUs:
		return fmt.Errorf("%w: %d GPUs (want 1..%d)", ErrOfferSchema, len(o.Gpus), MaxOfferGPUs)
	}
	if o.Attestation != proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED &&
		o.Attestation != proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE {
		return fmt.Errorf("%w: attestation level %v", ErrOfferSchema, o.Attestation)
	}
	if err := validateScheduler(o); err != nil {
		return err
	}
	seen := make(map[string]bool, len(o.Gpus))
	for i, g := range o.Gpus {
		switch {
		case g.Uuid == "" || len(g.Uuid) > 96:
			return fmt.Errorf("%w: GPU %d: bad uuid", ErrOfferSchema, i)
		case seen[g.Uuid]:
			return fmt.Errorf("%w: GPU %d: duplicate uuid %s", ErrOfferSchema, i, g.Uuid)
		case !ValidMarketKey(g.Market):
			return fmt.Errorf("%w: GPU %d: bad market key %q", ErrOfferSchema, i, g.Market)
		case g.MemoryBytes == 0:
			return fmt.Errorf("%w: GPU %d: no memory", ErrOfferSchema, i)
		case len(g.Name) > 128:
			return fmt.Errorf("%w: GPU %d: name too long", ErrOfferSchema, i)
		}
		seen[g.Uuid] = true
		if err := validateLeasedUntil(i, g, o.CreatedUnixMs); err != nil {
			return err
		}
		if g.Evidence != nil {
			if len(g.Evidence.Report) == 0 || len(g.Evidence.Chain) == 0 {
				return fmt.Errorf("%w: GPU %d: empty evidence", ErrOfferEvidence, i)
			}
			for _, c := range g.Evidence.Chain {
				if int(c) >= len(o.Certs) {
					return fmt.Errorf("%w: GPU %d: certificate %d of %d", ErrOfferEvidence, i, c, len(o.Certs))
				}
			}
		} else if o.Attestation == proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE {
			return fmt.Errorf("%w: GPU %d lacks evidence in a cc-evidence offer", ErrOfferEvidence, i)
		}
	}
	if o.Attestation == proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE &&
		!bytes.Equal(o.EvidenceNonce, proto.EvidenceNonce(o.Provider, o.Seq)) {
		// The nonce binds the evidence to this provider and seq, so no
		// provider can pass off another's evidence as its own.
		return fmt.Errorf("%w: evidence nonce is not the offer's own (provider, seq) nonce", ErrOfferEvidence)
	}
	p := o.Pricing
	if p == nil {
		return fmt.Errorf("%w: no pricing", ErrOfferSchema)
	}
	if _, err := LookupCurrency(p.Currency); err != nil {
		return fmt.Errorf("%w: %v", ErrOfferSchema, err)
	}
	if p.OnDemandMicros <= 0 || p.OnDemandMicros > MaxPriceMicros || p.SpotFloorMicros < 0 || p.SpotFloorMicros > p.OnDemandMicros {
		return fmt.Errorf("%w: on-demand %d, spot floor %d micros", ErrOfferPrice, p.OnDemandMicros, p.SpotFloorMicros)
	}
	for _, d := range p.Reserved {
		if d.BasisPoints == 0 || d.BasisPoints >= 10_000 || d.MinDurationS <= 0 {
			return fmt.Errorf("%w: reserved discount %d bp from %ds", ErrOfferPrice, d.BasisPoints, d.MinDurationS)
		}
	}
	if h := o.Host; h != nil && (h.MilliCpusPerGpu > MaxMilliCPUsPerGPU || h.MemoryBytesPerGpu > MaxBytesPerGPU || h.DiskBytesPerGpu > MaxBytesPerGPU) {
		return fmt.Errorf("%w: per GPU %d milli-vCPUs, %d bytes RAM, %d bytes disk: beyond any machine", ErrOfferSchema,
			h.MilliCpusPerGpu, h.MemoryBytesPerGpu, h.DiskBytesPerGpu)
	}
	if err := ValidateSchedule(p.Schedule, p.UtcOffsetMinutes); err != nil {
		return fmt.Errorf("%w: %w", ErrOfferPrice, err)
	}
	t := o.Terms
	if t == nil {
		return fmt.Errorf("%w: no lease terms", ErrOfferSchema)
	}
	if t.MinDurationS <= 0 || t.MaxDurationS < t.MinDurationS || t.BillingIncrementS <= 0 || t.BillingIncrementS > t.MaxDurationS {
		return fmt.Errorf("%w: lease terms min %ds max %ds increment %ds", ErrOfferSchema, t.MinDurationS, t.MaxDurationS, t.BillingIncrementS)
	}
	return nil
}

// OfferReason is a short label for why an offer was refused, for metrics.
func OfferReason(err error) string {
	for _, r := range []struct {
		err   error
		label string
	}{
		{ErrOfferExpired, "expired"},
		{ErrOfferFarFuture, "far-future"},
		{ErrOfferFromFuture, "from-future"},
		{ErrOfferSchema, "schema"},
		{ErrOfferPrice, "price"},
		{ErrOfferEvidence, "evidence"},
	} {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}

// OfferFilter selects offers the way a buyer searches a GPU rental site.
// Zero fields do not filter.
type OfferFilter struct {
	// GPU is a market key or a case-insensitive substring of the GPU's
	// market key or product name, e.g. "h100".
	GPU string
	// MinGPUs is the least number of GPUs that pass GPU and MinMemoryBytes.
	MinGPUs int
	// MinMemoryBytes is the least memory per GPU.
	MinMemoryBytes uint64
	// Region is an exact region code, or a prefix ending in "-" ("CN-").
	Region string
	// MaxPrice is the highest on-demand price per GPU-hour; offers in
	// another currency never match a price limit (there is no FX here).
	MaxPrice *Money
	// CCAttested keeps only offers carrying confidential-computing evidence.
	CCAttested bool
	// MinMilliCPUsPerGPU and MinRAMBytesPerGPU are the least CPU (in
	// thousandths of a vCPU) and RAM each leased GPU must come with.
	MinMilliCPUsPerGPU, MinRAMBytesPerGPU uint64
	// MinFreeGPUs is the least number of GPUs passing GPU and
	// MinMemoryBytes that are free (not leased) at Now.
	MinFreeGPUs int
	// Now is the time MinFreeGPUs is judged at.
	Now time.Time
}

// Bounds of what an offer may say comes with each GPU.
const (
	MaxMilliCPUsPerGPU = 1024 * 1000
	MaxBytesPerGPU     = 1 << 50
)

// MatchingGPUs counts the offer's GPUs that satisfy the GPU and memory filters.
func (f OfferFilter) MatchingGPUs(o *proto.Offer) int {
	n := 0
	for _, g := range o.Gpus {
		if f.gpuMatches(g) {
			n++
		}
	}
	return n
}

// gpuMatches reports whether one GPU passes the GPU and memory filters.
func (f OfferFilter) gpuMatches(g *proto.GPU) bool {
	want := strings.ToLower(f.GPU)
	if want != "" && g.Market != want && !strings.Contains(g.Market, want) && !strings.Contains(strings.ToLower(g.Name), want) {
		return false
	}
	return g.MemoryBytes >= f.MinMemoryBytes
}

// Match reports whether the offer passes every filter.
func (f OfferFilter) Match(o *proto.Offer) bool {
	min := max(f.MinGPUs, 1)
	if f.MatchingGPUs(o) < min {
		return false
	}
	if f.MinFreeGPUs > 0 && f.FreeGPUs(o, f.Now) < f.MinFreeGPUs {
		return false
	}
	if f.Region != "" {
		if strings.HasSuffix(f.Region, "-") {
			if !strings.HasPrefix(o.Region, f.Region) {
				return false
			}
		} else if o.Region != f.Region {
			return false
		}
	}
	if f.MaxPrice != nil {
		p := o.GetPricing()
		if p.GetCurrency() != f.MaxPrice.Currency || p.GetOnDemandMicros() > f.MaxPrice.Micros {
			return false
		}
	}
	if f.CCAttested && o.Attestation != proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE {
		return false
	}
	if o.GetHost().GetMilliCpusPerGpu() < f.MinMilliCPUsPerGPU || o.GetHost().GetMemoryBytesPerGpu() < f.MinRAMBytesPerGPU {
		return false
	}
	return true
}

// OfferSorts are the orders SortOffers knows.
var OfferSorts = []string{"price", "vram", "gpus"}

// SortOffers sorts offers in place: "price" cheapest first, "vram" most
// memory per GPU first, "gpus" most GPUs first. Ties fall back to the
// provider ID so the order is deterministic.
func SortOffers(offers []*proto.Offer, by string) error {
	var less func(a, b *proto.Offer) int
	switch by {
	case "", "price":
		less = func(a, b *proto.Offer) int {
			return cmpInt64(a.GetPricing().GetOnDemandMicros(), b.GetPricing().GetOnDemandMicros())
		}
	case "vram":
		less = func(a, b *proto.Offer) int { return cmpInt64(int64(maxMemory(b)), int64(maxMemory(a))) }
	case "gpus":
		less = func(a, b *proto.Offer) int { return cmpInt64(int64(len(b.Gpus)), int64(len(a.Gpus))) }
	default:
		return fmt.Errorf("market: unknown sort %q (want one of %s)", by, strings.Join(OfferSorts, ", "))
	}
	sort.SliceStable(offers, func(i, j int) bool {
		if c := less(offers[i], offers[j]); c != 0 {
			return c < 0
		}
		return string(offers[i].Provider) < string(offers[j].Provider)
	})
	return nil
}

func maxMemory(o *proto.Offer) uint64 {
	var m uint64
	for _, g := range o.Gpus {
		m = max(m, g.MemoryBytes)
	}
	return m
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Schedulers an offer may name (Offer.scheduler): the workload
// schedulers a provider can sell through.
var knownSchedulers = map[string]bool{"slurm": true}

// validateScheduler checks the fields a scheduler-managed offer states: a
// known scheduler, each GPU's node, and how many nodes a lease may span
// (at least one, at most the nodes the offer lists); an offer without a
// scheduler states none of them.
func validateScheduler(o *proto.Offer) error {
	if o.Scheduler == "" {
		if o.MaxNodes != 0 || o.GetHost().GetSchedulerVersion() != "" {
			return fmt.Errorf("%w: max nodes or scheduler version without a scheduler", ErrOfferSchema)
		}
		for i, g := range o.Gpus {
			if g.Node != "" {
				return fmt.Errorf("%w: GPU %d names node %q without a scheduler", ErrOfferSchema, i, truncateStr(g.Node, 64))
			}
		}
		return nil
	}
	if !knownSchedulers[o.Scheduler] {
		return fmt.Errorf("%w: scheduler %q is none of the known ones", ErrOfferSchema, truncateStr(o.Scheduler, 64))
	}
	if v := o.GetHost().GetSchedulerVersion(); len(v) > 64 {
		return fmt.Errorf("%w: scheduler version of %d bytes", ErrOfferSchema, len(v))
	}
	nodes := map[string]bool{}
	for i, g := range o.Gpus {
		if !validNodeName(g.Node) {
			return fmt.Errorf("%w: GPU %d: node %q is not a host name", ErrOfferSchema, i, truncateStr(g.Node, 64))
		}
		nodes[g.Node] = true
	}
	if o.MaxNodes < 1 || int(o.MaxNodes) > len(nodes) {
		return fmt.Errorf("%w: a lease may span %d nodes; the offer lists %d", ErrOfferSchema, o.MaxNodes, len(nodes))
	}
	return nil
}

// validNodeName reports whether s is a host name as schedulers name their
// nodes: 1–64 letters, digits, '-', '_' and '.', starting with a letter
// or digit.
func validNodeName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.'):
		default:
			return false
		}
	}
	return true
}

func truncateStr(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

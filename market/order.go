package market

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Order bounds. Prices share MaxPriceMicros with offers; creation times share
// MaxClockSkew.
const (
	// MaxOrderQuantity is the most GPUs one order may ask for or offer.
	MaxOrderQuantity = 1024
	// MaxOrderTTL is the furthest ahead an order may expire. It also bounds
	// how long the book must remember a dead order's ID (see Book).
	MaxOrderTTL = 24 * time.Hour
	// MaxLeaseDuration bounds every duration an order names.
	MaxLeaseDuration = 365 * 24 * time.Hour
	// MaxOrderIDLen bounds an order's ID (a CID string is about 60 bytes).
	MaxOrderIDLen = 128
	// MaxMakerLen bounds a maker's peer ID string.
	MaxMakerLen = 128
	// MaxClientKeyLen bounds a client idempotency key.
	MaxClientKeyLen = 64
	// MaxConstraintRegions bounds the regions a bid may list.
	MaxConstraintRegions = 16
)

// Attestation levels an ask's facts may claim and a bid may require, weakest
// first. They are the strings offers use.
const (
	AttestSelfReported = "self-reported"
	AttestCCEvidence   = "cc-evidence"
	AttestCCVerified   = "cc-verified"
)

// AttestationRank orders attestation levels: 1 for self-reported, 2 for
// cc-evidence, 3 for cc-verified, 0 for "" or anything unknown.
func AttestationRank(level string) int {
	switch level {
	case AttestSelfReported:
		return 1
	case AttestCCEvidence:
		return 2
	case AttestCCVerified:
		return 3
	}
	return 0
}

// Reasons an order (or a book operation on it) is refused. Each is returned
// wrapped with detail; use errors.Is to tell them apart and Reason for a
// metrics label. A bad currency wraps ErrUnknownCurrency.
var (
	// ErrOrderSchema is returned when an order lacks an ID or maker, or a
	// field is too long.
	ErrOrderSchema = errors.New("market: order malformed")
	// ErrOrderSide is returned when an order is neither a bid nor an ask.
	ErrOrderSide = errors.New("market: order side unknown")
	// ErrOrderQuantity is returned when a quantity is outside 1..MaxOrderQuantity.
	ErrOrderQuantity = errors.New("market: order quantity out of bounds")
	// ErrOrderPrice is returned when a price is outside 1..MaxPriceMicros.
	ErrOrderPrice = errors.New("market: order price out of bounds")
	// ErrOrderMarket is returned when a market key is malformed.
	ErrOrderMarket = errors.New("market: order market key malformed")
	// ErrOrderExpired is returned when an order's expiry is not after now.
	ErrOrderExpired = errors.New("market: order expired")
	// ErrOrderFarFuture is returned when an order expires more than
	// MaxOrderTTL after now.
	ErrOrderFarFuture = errors.New("market: order expiry too far ahead")
	// ErrOrderFromFuture is returned when an order's creation time is unset,
	// after its expiry, or more than MaxClockSkew after now.
	ErrOrderFromFuture = errors.New("market: order creation time invalid")
	// ErrOrderDuration is returned when durations are missing, inverted,
	// longer than MaxLeaseDuration, or set on the wrong side.
	ErrOrderDuration = errors.New("market: order duration invalid")
	// ErrOrderStart is returned for a forward start on other than reserved
	// time, in the past, or beyond MaxReserveHorizon.
	ErrOrderStart = errors.New("market: order start invalid")
	// ErrOrderLeaseType is returned when a lease type is unknown.
	ErrOrderLeaseType = errors.New("market: order lease type unknown")
	// ErrOrderFlags is returned when flags contradict each other (post-only
	// with immediate-or-cancel) or the time in force is unknown.
	ErrOrderFlags = errors.New("market: order flags invalid")
	// ErrOrderConstraints is returned when a bid's constraints are malformed
	// or an ask carries constraints.
	ErrOrderConstraints = errors.New("market: order constraints invalid")
	// ErrOrderFacts is returned when an ask's facts are malformed or a bid
	// carries facts.
	ErrOrderFacts = errors.New("market: order facts invalid")
)

// Side says whether an order buys (Bid) or sells (Ask) GPU time.
type Side uint8

// Sides. The zero Side is invalid.
const (
	Bid Side = 1 + iota
	Ask
)

// String returns "bid" or "ask".
func (s Side) String() string {
	switch s {
	case Bid:
		return "bid"
	case Ask:
		return "ask"
	}
	return fmt.Sprintf("side(%d)", uint8(s))
}

// Opposite returns the side an order of side s trades against.
func (s Side) Opposite() Side {
	if s == Bid {
		return Ask
	}
	return Bid
}

// ParseSide parses "bid" or "ask".
func ParseSide(s string) (Side, error) {
	switch s {
	case "bid":
		return Bid, nil
	case "ask":
		return Ask, nil
	}
	return 0, fmt.Errorf("%w: %q (want bid or ask)", ErrOrderSide, s)
}

// TimeInForce says how long an order stands.
type TimeInForce uint8

const (
	// GTC ("standing") rests in the book until filled, cancelled or expired.
	// It is the zero value.
	GTC TimeInForce = iota
	// IOC (immediate-or-cancel) takes what it can now; the rest is dropped,
	// never rested.
	IOC
)

// String returns "gtc" or "ioc".
func (t TimeInForce) String() string {
	switch t {
	case GTC:
		return "gtc"
	case IOC:
		return "ioc"
	}
	return fmt.Sprintf("tif(%d)", uint8(t))
}

// ParseTimeInForce parses "gtc" (or "standing") and "ioc".
func ParseTimeInForce(s string) (TimeInForce, error) {
	switch s {
	case "gtc", "standing":
		return GTC, nil
	case "ioc":
		return IOC, nil
	}
	return 0, fmt.Errorf("%w: time in force %q (want gtc or ioc)", ErrOrderFlags, s)
}

// Constraints are what a bid requires of the provider behind an ask. Zero
// fields do not constrain.
type Constraints struct {
	// Regions the GPUs must be in: exact codes ("CN-GZ") or prefixes ending
	// in "-" ("CN-"), as OfferFilter takes them.
	Regions []string
	// MinAttestation is the weakest attestation level accepted.
	MinAttestation string
	// MinMemoryBytes is the least memory per GPU.
	MinMemoryBytes uint64
	// LeaseTypes accepted; empty means only the bid's own LeaseType.
	LeaseTypes []LeaseType
}

func (c *Constraints) isZero() bool {
	return len(c.Regions) == 0 && c.MinAttestation == "" && c.MinMemoryBytes == 0 && len(c.LeaseTypes) == 0
}

// Facts describe the provider behind an ask. The caller fills them from the
// provider's validated offer; the book trusts them.
type Facts struct {
	Region      string // e.g. "CN-GZ"
	Attestation string // AttestSelfReported, AttestCCEvidence or AttestCCVerified
	MemoryBytes uint64 // per GPU
}

// Order is a bid or an ask for GPU time in one market. Its signed envelope
// travels on the market's gossip topic; the caller sets ID to that
// envelope's CID. Prices are micro-units of Currency per GPU-hour.
type Order struct {
	ID       string // CID of the signed envelope
	Maker    string // peer ID of the signer
	Side     Side
	Market   string // market key, e.g. "nvidia-h100-sxm5-80gb"
	Currency string
	Quantity uint32 // GPUs
	Price    int64  // micro-units per GPU-hour: a bid's limit, an ask's floor

	// LeaseType is what an ask sells, or what a bid wants (see
	// Constraints.LeaseTypes to accept several).
	LeaseType LeaseType
	// MinDuration and MaxDuration bound the leases an ask will sign.
	MinDuration, MaxDuration time.Duration
	// Duration is the lease a bid wants.
	Duration time.Duration

	Created time.Time
	Expires time.Time
	Nonce   uint64

	TimeInForce TimeInForce
	// PostOnly orders only ever rest: Match refuses them with ErrWouldCross
	// when they would trade.
	PostOnly bool
	// AllOrNone orders trade their whole remaining quantity in one fill
	// (resting) or fill completely in one Match (incoming), or not at all.
	AllOrNone bool
	// ClientKey is a client-chosen idempotency key: while the book knows an
	// order of this maker with this key, a second one is refused with a
	// *DuplicateKeyError naming the first.
	ClientKey string

	Constraints Constraints // bids only
	Facts       Facts       // asks only

	// Start, for reserved time only, is a forward block's start: the block
	// a bid wants, or the earliest an ask sells; zero is now (Created).
	Start time.Time
}

// MaxReserveHorizon is how far ahead a reserved block may start.
const MaxReserveHorizon = 30 * 24 * time.Hour

// BlockStart is when the order's lease would start: Start, or Created.
func (o *Order) BlockStart() time.Time {
	if o.Start.IsZero() {
		return o.Created
	}
	return o.Start
}

// Validate checks an order against now: bounds, syntax and consistency. It
// does not need ID (a caller may validate before sealing); Book.Add does.
func (o *Order) Validate(now time.Time) error {
	if !ValidMarketKey(o.Market) {
		return fmt.Errorf("%w: %q", ErrOrderMarket, o.Market)
	}
	return o.validate(now, true)
}

// validate is Validate without the market key syntax check, which a Book
// replaces by comparing with its own (already valid) key; a Book also
// skips the currency lookup (currency false) for the same reason.
func (o *Order) validate(now time.Time, currency bool) error {
	switch {
	case o.Side != Bid && o.Side != Ask:
		return fmt.Errorf("%w: %d", ErrOrderSide, o.Side)
	case o.Quantity == 0 || o.Quantity > MaxOrderQuantity:
		return fmt.Errorf("%w: %d GPUs (want 1..%d)", ErrOrderQuantity, o.Quantity, MaxOrderQuantity)
	case o.Price <= 0 || o.Price > MaxPriceMicros:
		return fmt.Errorf("%w: %d micros", ErrOrderPrice, o.Price)
	case o.Maker == "" || len(o.Maker) > MaxMakerLen:
		return fmt.Errorf("%w: maker of %d bytes", ErrOrderSchema, len(o.Maker))
	case len(o.ID) > MaxOrderIDLen:
		return fmt.Errorf("%w: ID of %d bytes", ErrOrderSchema, len(o.ID))
	case len(o.ClientKey) > MaxClientKeyLen:
		return fmt.Errorf("%w: client key of %d bytes", ErrOrderSchema, len(o.ClientKey))
	case !o.Expires.After(now):
		return fmt.Errorf("%w at %s", ErrOrderExpired, o.Expires.UTC().Format(time.RFC3339))
	case o.Expires.After(now.Add(MaxOrderTTL)): // Sub(now) > MaxOrderTTL, without Sub's overflow checks
		return fmt.Errorf("%w: %s ahead, limit %s", ErrOrderFarFuture, o.Expires.Sub(now).Round(time.Second), MaxOrderTTL)
	case o.Created.IsZero() || o.Created.After(now.Add(MaxClockSkew)) || !o.Expires.After(o.Created):
		return fmt.Errorf("%w: created %s", ErrOrderFromFuture, o.Created.UTC().Format(time.RFC3339))
	case !o.LeaseType.valid():
		return fmt.Errorf("%w: %d", ErrOrderLeaseType, o.LeaseType)
	case o.TimeInForce > IOC:
		return fmt.Errorf("%w: time in force %d", ErrOrderFlags, o.TimeInForce)
	case o.PostOnly && o.TimeInForce == IOC:
		return fmt.Errorf("%w: post-only with immediate-or-cancel never trades", ErrOrderFlags)
	case !o.Start.IsZero() && o.LeaseType != Reserved:
		return fmt.Errorf("%w: only reserved time starts later; a %s order starts now", ErrOrderStart, o.LeaseType)
	case !o.Start.IsZero() && o.Start.Before(o.Created.Add(-MaxClockSkew)):
		return fmt.Errorf("%w: %s is in the past", ErrOrderStart, o.Start.UTC().Format(time.RFC3339))
	case !o.Start.IsZero() && o.Start.After(o.Created.Add(MaxReserveHorizon)):
		return fmt.Errorf("%w: %s is beyond the %s horizon", ErrOrderStart, o.Start.UTC().Format(time.RFC3339), MaxReserveHorizon)
	}
	if currency {
		if _, err := LookupCurrency(o.Currency); err != nil {
			return err
		}
	}
	if o.Side == Bid {
		return o.validateBid()
	}
	return o.validateAsk()
}

func (o *Order) validateBid() error {
	switch {
	case o.Duration <= 0 || o.Duration > MaxLeaseDuration:
		return fmt.Errorf("%w: bid duration %s (want up to %s)", ErrOrderDuration, o.Duration, MaxLeaseDuration)
	case o.MinDuration != 0 || o.MaxDuration != 0:
		return fmt.Errorf("%w: a bid names one duration, not a range", ErrOrderDuration)
	case o.Facts != (Facts{}):
		return fmt.Errorf("%w: a bid carries no facts", ErrOrderFacts)
	}
	c := &o.Constraints
	if len(c.Regions) > MaxConstraintRegions {
		return fmt.Errorf("%w: %d regions (limit %d)", ErrOrderConstraints, len(c.Regions), MaxConstraintRegions)
	}
	for _, r := range c.Regions {
		if !validRegionPattern(r) {
			return fmt.Errorf("%w: region %q (want e.g. CN-GZ or CN-)", ErrOrderConstraints, r)
		}
	}
	if c.MinAttestation != "" && AttestationRank(c.MinAttestation) == 0 {
		return fmt.Errorf("%w: attestation %q", ErrOrderConstraints, c.MinAttestation)
	}
	if len(c.LeaseTypes) > 3 {
		return fmt.Errorf("%w: %d lease types", ErrOrderConstraints, len(c.LeaseTypes))
	}
	for _, t := range c.LeaseTypes {
		if !t.valid() {
			return fmt.Errorf("%w: lease type %d", ErrOrderConstraints, t)
		}
	}
	return nil
}

func (o *Order) validateAsk() error {
	switch {
	case o.Duration != 0:
		return fmt.Errorf("%w: an ask names a duration range, not one duration", ErrOrderDuration)
	case o.MinDuration <= 0 || o.MaxDuration < o.MinDuration || o.MaxDuration > MaxLeaseDuration:
		return fmt.Errorf("%w: ask durations %s..%s (want 0 < min <= max <= %s)", ErrOrderDuration, o.MinDuration, o.MaxDuration, MaxLeaseDuration)
	case !o.Constraints.isZero():
		return fmt.Errorf("%w: an ask carries no constraints", ErrOrderConstraints)
	case o.Facts.Region != "" && !regionSyntax(o.Facts.Region):
		return fmt.Errorf("%w: region %q", ErrOrderFacts, o.Facts.Region)
	case o.Facts.Attestation != "" && AttestationRank(o.Facts.Attestation) == 0:
		return fmt.Errorf("%w: attestation %q", ErrOrderFacts, o.Facts.Attestation)
	}
	return nil
}

// validRegionPattern accepts a region code or a prefix of one ending in "-".
func validRegionPattern(r string) bool {
	if p, ok := strings.CutSuffix(r, "-"); ok {
		return regionSyntax(p)
	}
	return regionSyntax(r)
}

// regionSyntax is ValidRegion without a regexp, for Book.Add's hot path
// (the regexp costs about a microsecond): two upper-case letters, then at
// most two parts of "-" and 1 to 8 upper-case letters or digits. A test
// holds it equal to ValidRegion.
func regionSyntax(s string) bool {
	if len(s) < 2 || !isUpper(s[0]) || !isUpper(s[1]) {
		return false
	}
	s = s[2:]
	for parts := 0; s != ""; parts++ {
		if parts == 2 || s[0] != '-' {
			return false
		}
		s = s[1:]
		n := 0
		for n < len(s) && (isUpper(s[n]) || ('0' <= s[n] && s[n] <= '9')) {
			n++
		}
		if n == 0 || n > 8 {
			return false
		}
		s = s[n:]
	}
	return true
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

func regionMatches(pattern, region string) bool {
	if strings.HasSuffix(pattern, "-") {
		return strings.HasPrefix(region, pattern)
	}
	return region == pattern
}

// accepts reports whether a bid can trade with an ask, price aside: the
// ask's facts satisfy the bid's constraints and its duration range holds the
// bid's duration.
func accepts(bid, ask *Order) bool { return mismatch(bid, ask) == "" }

// mismatch is the first reason (a Pass* label) why bid and ask cannot
// trade, "" when they can.
func mismatch(bid, ask *Order) string {
	if bid.BlockStart().Before(ask.BlockStart()) && !ask.Start.IsZero() {
		return PassStart
	}
	if bid.Duration < ask.MinDuration {
		return PassMinDuration
	}
	if bid.Duration > ask.MaxDuration {
		return PassMaxDuration
	}
	c := &bid.Constraints
	if len(c.LeaseTypes) == 0 {
		if ask.LeaseType != bid.LeaseType {
			return PassLeaseType
		}
	} else {
		ok := false
		for _, t := range c.LeaseTypes {
			ok = ok || t == ask.LeaseType
		}
		if !ok {
			return PassLeaseType
		}
	}
	if ask.Facts.MemoryBytes < c.MinMemoryBytes {
		return PassVRAM
	}
	if c.MinAttestation != "" && AttestationRank(ask.Facts.Attestation) < AttestationRank(c.MinAttestation) {
		return PassAttestation
	}
	if len(c.Regions) > 0 {
		for _, r := range c.Regions {
			if regionMatches(r, ask.Facts.Region) {
				return ""
			}
		}
		return PassRegion
	}
	return ""
}

// Reason is a short label for why an order, cancel or fill was refused, for
// metrics: "expired", "bad-price", "duplicate", ... It returns "" for nil and
// "other" for errors this package does not name.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}

var reasons = []struct {
	err   error
	label string
}{
	{ErrOrderExpired, "expired"},
	{ErrOrderFarFuture, "far-future"},
	{ErrOrderFromFuture, "bad-created"},
	{ErrOrderSchema, "schema"},
	{ErrOrderSide, "bad-side"},
	{ErrOrderQuantity, "bad-quantity"},
	{ErrOrderPrice, "bad-price"},
	{ErrUnknownCurrency, "bad-currency"},
	{ErrOrderMarket, "bad-market"},
	{ErrOrderDuration, "bad-duration"},
	{ErrOrderStart, "bad-start"},
	{ErrOrderLeaseType, "bad-lease-type"},
	{ErrOrderFlags, "bad-flags"},
	{ErrOrderConstraints, "bad-constraints"},
	{ErrOrderFacts, "bad-facts"},
	{ErrWrongBook, "wrong-book"},
	{ErrDuplicateKey, "duplicate-key"},
	{ErrDuplicate, "duplicate"},
	{ErrNotResting, "not-resting"},
	{ErrNotFound, "not-found"},
	{ErrNotMaker, "not-maker"},
	{ErrWouldCross, "would-cross"},
	{ErrOverfill, "overfill"},
	{ErrSelfMatch, "self-match"},
	{ErrBadFill, "bad-fill"},
	{ErrBadDiscount, "bad-discount"},
}

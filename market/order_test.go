package market

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

const bookMarket = "nvidia-h100-sxm5-80gb"

var bookT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testAsk is a valid spot ask resting at bookT0 for an hour.
func testAsk(id, maker string, qty uint32, price int64) *Order {
	return &Order{
		ID: id, Maker: maker, Side: Ask, Market: bookMarket, Currency: "USD",
		Quantity: qty, Price: price, LeaseType: Spot,
		MinDuration: time.Hour, MaxDuration: 24 * time.Hour,
		Created: bookT0, Expires: bookT0.Add(time.Hour),
		Facts: Facts{Region: "CN-GZ", Attestation: AttestCCEvidence, MemoryBytes: 80 << 30},
	}
}

// testBid is a valid spot bid for a 2-hour lease, resting at bookT0 for an hour.
func testBid(id, maker string, qty uint32, price int64) *Order {
	return &Order{
		ID: id, Maker: maker, Side: Bid, Market: bookMarket, Currency: "USD",
		Quantity: qty, Price: price, LeaseType: Spot, Duration: 2 * time.Hour,
		Created: bookT0, Expires: bookT0.Add(time.Hour),
	}
}

func withOrder(o *Order, f func(*Order)) *Order { f(o); return o }

func TestOrderValidate(t *testing.T) {
	tests := []struct {
		name string
		o    *Order
		want error
	}{
		{"ask", testAsk("a", "p1", 8, 2_000_000), nil},
		{"bid", testBid("b", "u1", 8, 2_000_000), nil},
		{"no ID is fine", withOrder(testBid("", "u1", 1, 1), func(o *Order) {}), nil},
		{"bid with constraints", withOrder(testBid("b", "u1", 1, 1), func(o *Order) {
			o.Constraints = Constraints{Regions: []string{"CN-", "US-CA"}, MinAttestation: AttestCCVerified, MinMemoryBytes: 1, LeaseTypes: []LeaseType{Spot, OnDemand}}
		}), nil},
		{"max quantity", testBid("b", "u1", MaxOrderQuantity, 1), nil},
		{"max price", testBid("b", "u1", 1, MaxPriceMicros), nil},
		{"expires in 24h", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Expires = bookT0.Add(MaxOrderTTL) }), nil},
		{"created within skew", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Created = bookT0.Add(MaxClockSkew) }), nil},

		{"no side", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Side = 0 }), ErrOrderSide},
		{"zero quantity", testBid("b", "u1", 0, 1), ErrOrderQuantity},
		{"too many GPUs", testBid("b", "u1", MaxOrderQuantity+1, 1), ErrOrderQuantity},
		{"zero price", testBid("b", "u1", 1, 0), ErrOrderPrice},
		{"negative price", testAsk("a", "p1", 1, -5), ErrOrderPrice},
		{"price too high", testAsk("a", "p1", 1, MaxPriceMicros+1), ErrOrderPrice},
		{"no maker", testBid("b", "", 1, 1), ErrOrderSchema},
		{"long client key", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.ClientKey = strings.Repeat("k", MaxClientKeyLen+1) }), ErrOrderSchema},
		{"long ID", testBid(strings.Repeat("i", MaxOrderIDLen+1), "u1", 1, 1), ErrOrderSchema},
		{"bad currency", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Currency = "XXX" }), ErrUnknownCurrency},
		{"bad market", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Market = "Nvidia H100" }), ErrOrderMarket},
		{"market trailing dash", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Market = "h100-" }), ErrOrderMarket},
		{"long market", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Market = strings.Repeat("a", 65) }), ErrOrderMarket},
		{"expired", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Expires = bookT0 }), ErrOrderExpired},
		{"expires too late", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Expires = bookT0.Add(MaxOrderTTL + time.Second) }), ErrOrderFarFuture},
		{"created in future", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Created = bookT0.Add(MaxClockSkew + time.Second) }), ErrOrderFromFuture},
		{"no created", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Created = time.Time{} }), ErrOrderFromFuture},
		{"bid no duration", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Duration = 0 }), ErrOrderDuration},
		{"bid duration too long", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Duration = MaxLeaseDuration + 1 }), ErrOrderDuration},
		{"bid with range", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.MinDuration = time.Hour }), ErrOrderDuration},
		{"ask min > max", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.MinDuration = 2 * o.MaxDuration }), ErrOrderDuration},
		{"ask zero min", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.MinDuration = 0 }), ErrOrderDuration},
		{"ask with duration", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.Duration = time.Hour }), ErrOrderDuration},
		{"no lease type", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.LeaseType = 0 }), ErrOrderLeaseType},
		{"post-only IOC", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.PostOnly, o.TimeInForce = true, IOC }), ErrOrderFlags},
		{"unknown TIF", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.TimeInForce = 7 }), ErrOrderFlags},
		{"bad region", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Constraints.Regions = []string{"guangzhou"} }), ErrOrderConstraints},
		{"bad min attestation", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Constraints.MinAttestation = "trust-me" }), ErrOrderConstraints},
		{"bad constraint lease type", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Constraints.LeaseTypes = []LeaseType{9} }), ErrOrderConstraints},
		{"too many regions", withOrder(testBid("b", "u1", 1, 1), func(o *Order) {
			o.Constraints.Regions = make([]string, MaxConstraintRegions+1)
			for i := range o.Constraints.Regions {
				o.Constraints.Regions[i] = "CN-GZ"
			}
		}), ErrOrderConstraints},
		{"ask with constraints", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.Constraints.MinMemoryBytes = 1 }), ErrOrderConstraints},
		{"bid with facts", withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Facts.Region = "CN-GZ" }), ErrOrderFacts},
		{"ask bad region", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.Facts.Region = "cn-gz" }), ErrOrderFacts},
		{"ask bad attestation", withOrder(testAsk("a", "p1", 1, 1), func(o *Order) { o.Facts.Attestation = "gold" }), ErrOrderFacts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate(bookT0)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Validate() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("boom"), "other"},
		{ErrOrderExpired, "expired"},
		{ErrOrderPrice, "bad-price"},
		{testBid("b", "u1", 1, 1).Validate(bookT0.Add(2 * time.Hour)), "expired"},
		{withOrder(testBid("b", "u1", 1, 1), func(o *Order) { o.Currency = "XXX" }).Validate(bookT0), "bad-currency"},
		{&DuplicateKeyError{ID: "x"}, "duplicate-key"},
		{ErrDuplicate, "duplicate"},
		{ErrWouldCross, "would-cross"},
		{ErrOverfill, "overfill"},
		{ErrNotMaker, "not-maker"},
	}
	for _, tt := range tests {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestParseEnums(t *testing.T) {
	for _, s := range []Side{Bid, Ask} {
		if got, err := ParseSide(s.String()); got != s || err != nil {
			t.Errorf("ParseSide(%q) = %v, %v, want %v", s, got, err, s)
		}
	}
	for _, lt := range []LeaseType{Spot, OnDemand, Reserved} {
		if got, err := ParseLeaseType(lt.String()); got != lt || err != nil {
			t.Errorf("ParseLeaseType(%q) = %v, %v, want %v", lt, got, err, lt)
		}
		b, err := lt.MarshalText()
		var back LeaseType
		if err != nil || back.UnmarshalText(b) != nil || back != lt {
			t.Errorf("LeaseType %v text round trip = %v, %v", lt, back, err)
		}
	}
	if got := OnDemand.String(); got != "on-demand" {
		t.Errorf("OnDemand.String() = %q, want on-demand", got)
	}
	for _, s := range []string{"gtc", "standing", "ioc"} {
		if _, err := ParseTimeInForce(s); err != nil {
			t.Errorf("ParseTimeInForce(%q) = %v, want nil", s, err)
		}
	}
	if _, err := ParseSide("buy"); !errors.Is(err, ErrOrderSide) {
		t.Errorf("ParseSide(buy) = %v, want %v", err, ErrOrderSide)
	}
	if _, err := ParseLeaseType("Spot"); !errors.Is(err, ErrOrderLeaseType) {
		t.Errorf("ParseLeaseType(Spot) = %v, want %v", err, ErrOrderLeaseType)
	}
	if _, err := LeaseType(0).MarshalText(); err == nil {
		t.Errorf("LeaseType(0).MarshalText() = nil error, want one")
	}
}

// fuzzOrder decodes an order from fuzz bytes: every field can take valid,
// boundary and invalid values.
func fuzzOrder(data []byte) *Order {
	r := byteReader{data: data}
	o := &Order{
		ID:          r.str(4),
		Maker:       r.str(3),
		Side:        Side(r.byte() % 4),
		Market:      r.pick(bookMarket, "h100", "H100", "", "a--b", strings.Repeat("a", 65)),
		Currency:    r.pick("USD", "JPY", "usd", ""),
		Quantity:    uint32(r.u16()) % 1100,
		Price:       int64(r.u64()) >> (r.byte() % 64),
		LeaseType:   LeaseType(r.byte() % 5),
		MinDuration: time.Duration(r.u64()) >> (r.byte() % 64),
		MaxDuration: time.Duration(r.u64()) >> (r.byte() % 64),
		Duration:    time.Duration(r.u64()) >> (r.byte() % 64),
		Created:     bookT0.Add(time.Duration(int16(r.u16())) * time.Minute),
		Expires:     bookT0.Add(time.Duration(int16(r.u16())) * time.Minute),
		Nonce:       r.u64(),
		TimeInForce: TimeInForce(r.byte() % 3),
		PostOnly:    r.byte()%2 == 0,
		AllOrNone:   r.byte()%2 == 0,
		ClientKey:   r.str(70),
	}
	if r.byte()%2 == 0 {
		o.Constraints = Constraints{
			Regions:        []string{r.pick("CN-GZ", "CN-", "cn", "")},
			MinAttestation: r.pick("", AttestSelfReported, AttestCCVerified, "x"),
			MinMemoryBytes: r.u64(),
			LeaseTypes:     []LeaseType{LeaseType(r.byte() % 5)},
		}
	}
	if r.byte()%2 == 0 {
		o.Facts = Facts{Region: r.pick("", "US-CA", "us"), Attestation: r.pick("", AttestCCEvidence, "y"), MemoryBytes: r.u64()}
	}
	return o
}

func TestRegionSyntax(t *testing.T) {
	for _, s := range []string{
		"", "C", "CN", "cn", "CN-", "CN-GZ", "CN-GZ-1", "CN-GZ-1-2", "US-CA", "CN--GZ", "CN-G Z",
		"CN-ABCDEFGH", "CN-ABCDEFGHI", "CNN", "C1", "CN-gz", "CN-GZ\n", "\nCN", "CN-12345678-A",
	} {
		if got, want := regionSyntax(s), ValidRegion(s); got != want {
			t.Errorf("regionSyntax(%q) = %v, want %v (ValidRegion)", s, got, want)
		}
	}
}

func FuzzRegionSyntax(f *testing.F) {
	for _, s := range []string{"CN-GZ", "US-CA-1", "CN-", "X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := regionSyntax(s), ValidRegion(s); got != want {
			t.Errorf("regionSyntax(%q) = %v, want %v (ValidRegion)", s, got, want)
		}
	})
}

func FuzzOrderValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x01\x00\x00\x01\x00\x08\x00\x00\x00\x00\x00\x00\x01\x00"))
	f.Add([]byte("ordermakerbid and ask with a lot of bytes to fill every field of the order......................"))
	f.Add(binary.BigEndian.AppendUint64(make([]byte, 16), 1<<62))
	f.Fuzz(func(t *testing.T, data []byte) {
		o := fuzzOrder(data)
		err := o.Validate(bookT0)
		if Reason(err) == "other" {
			t.Fatalf("Validate() = %v: an error without a reason label", err)
		}
		if err != nil {
			return
		}
		switch {
		case o.Quantity < 1 || o.Quantity > MaxOrderQuantity:
			t.Fatalf("Validate() accepted quantity %d", o.Quantity)
		case o.Price < 1 || o.Price > MaxPriceMicros:
			t.Fatalf("Validate() accepted price %d", o.Price)
		case !o.Expires.After(bookT0) || o.Expires.Sub(bookT0) > MaxOrderTTL:
			t.Fatalf("Validate() accepted expiry %s", o.Expires)
		case o.Side == Bid && (o.Duration <= 0 || o.Duration > MaxLeaseDuration):
			t.Fatalf("Validate() accepted bid duration %s", o.Duration)
		case o.Side == Ask && (o.MinDuration <= 0 || o.MinDuration > o.MaxDuration || o.MaxDuration > MaxLeaseDuration):
			t.Fatalf("Validate() accepted ask durations %s..%s", o.MinDuration, o.MaxDuration)
		case !ValidMarketKey(o.Market) || !o.LeaseType.valid() || (o.PostOnly && o.TimeInForce == IOC):
			t.Fatalf("Validate() accepted %+v", o)
		}
	})
}

// byteReader hands out fuzz bytes; past the end it returns zeros.
type byteReader struct {
	data []byte
	off  int
}

func (r *byteReader) byte() byte {
	if r.off >= len(r.data) {
		return 0
	}
	r.off++
	return r.data[r.off-1]
}

func (r *byteReader) u16() uint16 { return uint16(r.byte())<<8 | uint16(r.byte()) }

func (r *byteReader) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

func (r *byteReader) str(max int) string {
	n := int(r.byte()) % (max + 1)
	var sb strings.Builder
	for range n {
		sb.WriteByte('a' + r.byte()%26)
	}
	return sb.String()
}

func (r *byteReader) pick(s ...string) string { return s[int(r.byte())%len(s)] }

func (r *byteReader) done() bool { return r.off >= len(r.data) }

// TestValidateTimeBounds holds Validate's expiry and creation bounds to
// their definitions with Sub (which saturates instead of overflowing), at
// the boundaries and at the far ends of time.
func TestValidateTimeBounds(t *testing.T) {
	now := bookT0
	far := []time.Time{time.Unix(1<<62, 0), time.Unix(-1<<62, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
	var times []time.Time
	for _, d := range []time.Duration{MaxOrderTTL, MaxClockSkew, 0} {
		for _, e := range []time.Duration{-time.Nanosecond, 0, time.Nanosecond} {
			times = append(times, now.Add(d+e))
		}
	}
	times = append(times, far...)
	for _, exp := range times {
		for _, created := range times {
			o := testBid("o", "u", 1, 1_000_000)
			o.Expires, o.Created = exp, created
			err := o.Validate(now)
			var want error
			switch {
			case !exp.After(now):
				want = ErrOrderExpired
			case exp.Sub(now) > MaxOrderTTL:
				want = ErrOrderFarFuture
			case created.IsZero() || created.Sub(now) > MaxClockSkew || !exp.After(created):
				want = ErrOrderFromFuture
			}
			if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
				t.Errorf("expires %s, created %s: Validate() = %v, want %v", exp, created, err, want)
			}
		}
	}
}

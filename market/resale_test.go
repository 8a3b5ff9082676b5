package market

import (
	"errors"
	"testing"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

func resaleLease() *proto.Lease {
	return &proto.Lease{
		Id: "L", Provider: []byte("provider"), Buyer: []byte("holder"), Gpus: []string{"GPU-a", "GPU-b"},
		PriceMicros: 2_000_000, Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED, DurationS: 3600,
		BillingIntervalS: 60, StartUnixMs: time.Date(2026, 1, 1, 0, 0, 0, 123_000_000, time.UTC).UnixMilli(), Market: "nvidia-h100-sxm5-80gb",
	}
}

func TestResalePremium(t *testing.T) {
	for _, c := range []struct {
		name          string
		resale, lease int64
		gpus          uint32
		ms            int64
		want          int64
	}{
		{"dearer: the buyer pays", 2_600_000, 2_000_000, 2, 3_600_000, 1_200_000},
		{"cheaper: the holder pays", 1_500_000, 2_000_000, 2, 1_800_000, -500_000},
		{"at the lease's price", 2_000_000, 2_000_000, 8, 3_600_000, 0},
		{"half a micro rounds away from zero", 1_000_001, 1_000_000, 1, 1_800_000, 1},
		{"and below zero too", 1_000_000, 1_000_001, 1, 1_800_000, -1},
		{"under half rounds down", 1_000_001, 1_000_000, 1, 1_799_999, 0},
		{"no time left", 3_000_000, 2_000_000, 1, 0, 0},
		// The product overflows int64 on the way; the premium does not.
		{"largest", MaxPriceMicros, 1, MaxOrderQuantity, MaxLeaseDuration.Milliseconds(), (MaxPriceMicros - 1) * MaxOrderQuantity * 8760},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ResalePremium(c.resale, c.lease, c.gpus, c.ms)
			if err != nil || got != c.want {
				t.Errorf("ResalePremium(%d, %d, %d, %d) = %d, %v; want %d", c.resale, c.lease, c.gpus, c.ms, got, err, c.want)
			}
		})
	}
	for _, bad := range [][4]int64{{0, 1, 1, 1}, {1, -1, 1, 1}, {1, 1, 0, 1}, {1, 1, 1, -1}, {1, 1, 1, MaxLeaseDuration.Milliseconds() + 1}} {
		if _, err := ResalePremium(bad[0], bad[1], uint32(bad[2]), bad[3]); !errors.Is(err, ErrResale) {
			t.Errorf("ResalePremium(%v) = %v, want ErrResale", bad, err)
		}
	}
}

func TestHandoverAt(t *testing.T) {
	l := resaleLease()
	start := time.UnixMilli(l.StartUnixMs)
	now := start.Add(90*time.Second + 700*time.Millisecond)
	at, err := HandoverAt(l, start.Add(60*time.Second).UnixMilli(), now)
	if err != nil || !at.Equal(start.Add(90*time.Second)) {
		t.Errorf("HandoverAt = %s, %v; want the last whole second of the block, %s", at, err, start.Add(90*time.Second))
	}
	if _, err := HandoverAt(l, start.Add(91*time.Second).UnixMilli(), now); ResaleReason(err) != "billing" {
		t.Errorf("HandoverAt before a signed receipt's end = %v, want refused (billing)", err)
	}
	for _, t0 := range []time.Time{start.Add(-time.Second), LeaseEnd(l)} {
		if _, err := HandoverAt(l, 0, t0); ResaleReason(err) != "ended" {
			t.Errorf("HandoverAt(%s) = %v, want refused (ended)", t0, err)
		}
	}
}

func TestResoldTerms(t *testing.T) {
	l := resaleLease()
	at := time.UnixMilli(l.StartUnixMs).Add(90 * time.Second)
	n := ResoldTerms(l, []byte("buyer"), "L2", at)
	if err := CheckResoldTerms(l, n, []byte("buyer")); err != nil {
		t.Fatalf("CheckResoldTerms(ResoldTerms) = %v", err)
	}
	if n.DurationS != 3600-90 || !LeaseEnd(n).Equal(LeaseEnd(l)) || n.PriceMicros != l.PriceMicros {
		t.Errorf("ResoldTerms = %+v, want the rest of the block at the lease's price", n)
	}
	for _, c := range []struct {
		label string
		bend  func(*proto.Lease)
	}{
		{"bad-provider", func(n *proto.Lease) { n.Provider = []byte("another") }},
		{"wrong-terms", func(n *proto.Lease) { n.Buyer = []byte("another") }},
		{"wrong-gpus", func(n *proto.Lease) { n.Gpus = []string{"GPU-a", "GPU-c"} }},
		{"wrong-gpus", func(n *proto.Lease) { n.Gpus = n.Gpus[:1] }},
		{"wrong-price", func(n *proto.Lease) { n.PriceMicros++ }},
		{"wrong-duration", func(n *proto.Lease) { n.DurationS-- }},
		{"wrong-duration", func(n *proto.Lease) { n.StartUnixMs += 500; n.DurationS-- }},
		{"wrong-duration", func(n *proto.Lease) { n.StartUnixMs = l.StartUnixMs - 1000; n.DurationS = 3601 }},
		{"wrong-terms", func(n *proto.Lease) { n.BillingIntervalS = 1 }},
		{"wrong-terms", func(n *proto.Lease) { n.LeaseType = proto.LeaseType_LEASE_TYPE_ON_DEMAND }},
	} {
		bad := gproto.Clone(n).(*proto.Lease)
		c.bend(bad)
		if err := CheckResoldTerms(l, bad, []byte("buyer")); ResaleReason(err) != c.label {
			t.Errorf("CheckResoldTerms(%+v) = %v, want refused (%s)", bad, err, c.label)
		}
	}
}

func TestCheckPremiumAndHandover(t *testing.T) {
	l := resaleLease()
	now := time.UnixMilli(l.StartUnixMs).Add(90*time.Second + 300*time.Millisecond)
	n := ResoldTerms(l, []byte("buyer"), "L2", time.UnixMilli(l.StartUnixMs).Add(90*time.Second))
	p, err := NewPremium(l, n, 2_600_000, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(600_000 * 2 * (3600 - 90) / 3600); p.PremiumMicros != want {
		t.Errorf("premium = %d, want %d", p.PremiumMicros, want)
	}
	if err := CheckPremium(p, []byte("holder"), l, n, 2_600_000, now); err != nil {
		t.Errorf("CheckPremium(NewPremium) = %v", err)
	}
	for name, c := range map[string]struct {
		signer string
		price  int64
		bend   func(*proto.Premium)
	}{
		"signed by another": {"buyer", 2_600_000, func(*proto.Premium) {}},
		"another amount":    {"holder", 2_600_000, func(p *proto.Premium) { p.PremiumMicros++ }},
		"another price":     {"holder", 2_500_000, func(*proto.Premium) {}},
		"another lease":     {"holder", 2_600_000, func(p *proto.Premium) { p.NewLeaseId = "L3" }},
		"another span":      {"holder", 2_600_000, func(p *proto.Premium) { p.FromUnixMs -= 1000 }},
		"stale":             {"holder", 2_600_000, func(p *proto.Premium) { p.CreatedUnixMs -= time.Hour.Milliseconds() }},
	} {
		bad := gproto.Clone(p).(*proto.Premium)
		c.bend(bad)
		if err := CheckPremium(bad, []byte(c.signer), l, n, c.price, now); !errors.Is(err, ErrResale) {
			t.Errorf("CheckPremium, %s = %v, want refused", name, err)
		}
	}

	h := &proto.Handover{LeaseId: "L", Holder: []byte("holder"), Buyer: []byte("buyer"), Take: []byte("take"), AskId: "ask", CreatedUnixMs: now.UnixMilli()}
	if err := CheckHandover(h, []byte("holder"), l, now); err != nil {
		t.Errorf("CheckHandover = %v", err)
	}
	spot := gproto.Clone(l).(*proto.Lease)
	spot.LeaseType = proto.LeaseType_LEASE_TYPE_SPOT
	for _, c := range []struct {
		label  string
		signer string
		terms  *proto.Lease
		at     time.Time
		bend   func(*proto.Handover)
	}{
		{"not-holder", "buyer", l, now, func(*proto.Handover) {}},
		{"not-holder", "buyer", l, now, func(h *proto.Handover) { h.Holder = []byte("buyer") }},
		{"bad-buyer", "holder", l, now, func(h *proto.Handover) { h.Buyer = []byte("provider") }},
		{"bad-buyer", "holder", l, now, func(h *proto.Handover) { h.Buyer = []byte("holder") }},
		{"not-reserved", "holder", spot, now, func(*proto.Handover) {}},
		{"ended", "holder", l, LeaseEnd(l), func(h *proto.Handover) { h.CreatedUnixMs = LeaseEnd(l).UnixMilli() }},
		{"stale", "holder", l, now, func(h *proto.Handover) { h.CreatedUnixMs += time.Hour.Milliseconds() }},
		{"schema", "holder", l, now, func(h *proto.Handover) { h.Take = nil }},
	} {
		bad := gproto.Clone(h).(*proto.Handover)
		c.bend(bad)
		if err := CheckHandover(bad, []byte(c.signer), c.terms, c.at); ResaleReason(err) != c.label {
			t.Errorf("CheckHandover(%+v) = %v, want refused (%s)", bad, err, c.label)
		}
	}
}

// FuzzResaleChecks: any lease, new lease, handover and premium bytes are
// checked without a panic, and a new lease or premium the checks accept is
// the rest of the block at the lease's price.
func FuzzResaleChecks(f *testing.F) {
	l := resaleLease()
	at := time.UnixMilli(l.StartUnixMs).Add(90 * time.Second)
	n := ResoldTerms(l, []byte("buyer"), "L2", at)
	p, _ := NewPremium(l, n, 2_600_000, at)
	h := &proto.Handover{LeaseId: "L", Holder: []byte("holder"), Buyer: []byte("buyer"), Take: []byte("take"), AskId: "ask", CreatedUnixMs: at.UnixMilli()}
	lb, _ := gproto.Marshal(l)
	nb, _ := gproto.Marshal(n)
	pb, _ := gproto.Marshal(p)
	hb, _ := gproto.Marshal(h)
	f.Add(lb, nb, hb, pb, int64(2_600_000))
	f.Add(lb, lb, hb, pb, int64(1))
	f.Add([]byte{}, nb, []byte{0xff}, pb, int64(-5))
	f.Fuzz(func(t *testing.T, lb, nb, hb, pb []byte, price int64) {
		var l, n proto.Lease
		var h proto.Handover
		var p proto.Premium
		if gproto.Unmarshal(lb, &l) != nil || gproto.Unmarshal(nb, &n) != nil || gproto.Unmarshal(hb, &h) != nil || gproto.Unmarshal(pb, &p) != nil {
			return
		}
		now := time.UnixMilli(h.CreatedUnixMs)
		_ = CheckHandover(&h, h.Holder, &l, now)
		_, _ = HandoverAt(&l, 0, now)
		if CheckResoldTerms(&l, &n, n.Buyer) == nil {
			if n.PriceMicros != l.PriceMicros || !LeaseEnd(&n).Equal(LeaseEnd(&l)) || len(n.Gpus) != len(l.Gpus) {
				t.Fatalf("accepted new lease %+v of %+v", &n, &l)
			}
			if CheckPremium(&p, p.Holder, &l, &n, price, time.UnixMilli(p.CreatedUnixMs)) == nil {
				want, err := ResalePremium(price, l.PriceMicros, uint32(len(l.Gpus)), LeaseEnd(&l).UnixMilli()-n.StartUnixMs)
				if err != nil || p.PremiumMicros != want {
					t.Fatalf("accepted premium %d, want %d (%v)", p.PremiumMicros, want, err)
				}
			}
		}
	})
}

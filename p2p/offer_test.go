package p2p_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// t0 is the fixed clock of the validator tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const h100 = "nvidia-h100-sxm5-80gb"

// testKey returns a deterministic Ed25519 key, so fuzz seeds and
// benchmarks see the same bytes on every run.
func testKey(tb testing.TB, seed byte) (crypto.PrivKey, peer.ID) {
	tb.Helper()
	k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		tb.Fatalf("GenerateEd25519Key: %v", err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		tb.Fatalf("IDFromPrivateKey: %v", err)
	}
	return k, id
}

// testOffer is a realistic self-reported offer of an 8×H100 SXM5 machine,
// created a minute before now and valid for an hour.
func testOffer(p peer.ID, seq uint64, now time.Time) *proto.Offer {
	o := &proto.Offer{
		Provider:      []byte(p),
		Seq:           seq,
		CreatedUnixMs: now.Add(-time.Minute).UnixMilli(),
		ExpiresUnixMs: now.Add(time.Hour).UnixMilli(),
		Region:        "CN-GZ",
		Host: &proto.Host{
			Backend:           "nvml",
			DriverVersion:     "550.90.07",
			CudaDriverVersion: "12.4",
			NvmlVersion:       "12.550.90.07",
			CpuCores:          224,
			MemoryBytes:       2 << 40,
			Interconnect:      "nvlink",
			NetworkMbps:       400_000,
			StorageBytes:      30 << 40,
		},
		Pricing: &proto.Pricing{
			Currency:        "USD",
			OnDemandMicros:  2_490_000,
			SpotFloorMicros: 1_245_000,
			Reserved: []*proto.Discount{
				{MinDurationS: 7 * 24 * 3600, BasisPoints: 1000},
				{MinDurationS: 30 * 24 * 3600, BasisPoints: 2000},
			},
		},
		Terms: &proto.LeaseTerms{
			MinDurationS:      3600,
			MaxDurationS:      30 * 24 * 3600,
			BillingIncrementS: 60,
		},
		Attestation: proto.AttestationLevel_ATTESTATION_LEVEL_SELF_REPORTED,
		Addrs:       []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"},
		Compliance:  []string{"iso27001"},
	}
	for i := range 8 {
		o.Gpus = append(o.Gpus, &proto.GPU{
			Uuid:              fmt.Sprintf("GPU-%08x-1b2c-4d5e-8f90-%012x", 0xa1b2c3d4+i, 0x1234567890+i),
			Name:              "NVIDIA H100 80GB HBM3",
			Market:            h100,
			MemoryBytes:       81559 << 20,
			PciBusId:          fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i),
			ComputeCapability: "9.0",
			Architecture:      "hopper",
			Serial:            fmt.Sprintf("165322%07d", 1000+i),
			PowerLimitMw:      700_000,
			Ecc:               "enabled",
		})
	}
	return o
}

// withCCEvidence turns o into a cc-evidence offer: a 4117-byte report per
// GPU (the size of an H100 SPDM report) and a shared 5-certificate chain.
func withCCEvidence(o *proto.Offer) *proto.Offer { return withEvidence(o, 4117, 900) }

// withEvidence turns o into a cc-evidence offer with reports and certificates
// of the given sizes (small ones keep fuzz seeds quick to mutate).
func withEvidence(o *proto.Offer, reportLen, certLen int) *proto.Offer {
	o.Attestation = proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE
	o.EvidenceNonce = proto.EvidenceNonce(o.Provider, o.Seq)
	for i := range 5 {
		o.Certs = append(o.Certs, bytes.Repeat([]byte{0x30, byte(i)}, certLen/2))
	}
	for i, g := range o.Gpus {
		g.Evidence = &proto.Evidence{
			Report: bytes.Repeat([]byte{0x11, byte(i), 0xe0}, reportLen/3+1)[:reportLen],
			Chain:  []uint32{0, 1, 2, 3, 4},
		}
	}
	return o
}

// leaseGPUs marks the offer's first three GPUs leased: two until ten
// minutes after now, one until an hour after.
func leaseGPUs(o *proto.Offer, now time.Time) *proto.Offer {
	for i, d := range []time.Duration{10 * time.Minute, 10 * time.Minute, time.Hour} {
		o.Gpus[i].LeasedUntilUnixMs = now.Add(d).UnixMilli()
	}
	return o
}

func seal(tb testing.TB, k crypto.PrivKey, o *proto.Offer) []byte {
	tb.Helper()
	b, err := p2p.SealOffer(k, o)
	if err != nil {
		tb.Fatalf("SealOffer: %v", err)
	}
	return b
}

// rawRecord seals arbitrary payload bytes under any domain and payload type.
// It is deliberately not registered with record.RegisterType.
type rawRecord struct {
	domain  string
	codec   []byte
	payload []byte
}

func (r *rawRecord) Domain() string                 { return r.domain }
func (r *rawRecord) Codec() []byte                  { return r.codec }
func (r *rawRecord) MarshalRecord() ([]byte, error) { return r.payload, nil }
func (r *rawRecord) UnmarshalRecord(b []byte) error { r.payload = b; return nil }

func sealRaw(tb testing.TB, k crypto.PrivKey, domain string, codec, payload []byte) []byte {
	tb.Helper()
	env, err := record.Seal(&rawRecord{domain: domain, codec: codec, payload: payload}, k)
	if err != nil {
		tb.Fatalf("record.Seal: %v", err)
	}
	b, err := env.Marshal()
	if err != nil {
		tb.Fatalf("Envelope.Marshal: %v", err)
	}
	return b
}

func marshalOffer(tb testing.TB, o *proto.Offer) []byte {
	tb.Helper()
	b, err := gproto.MarshalOptions{Deterministic: true}.Marshal(o)
	if err != nil {
		tb.Fatalf("Marshal offer: %v", err)
	}
	return b
}

// editEnvelope decodes envelope bytes, lets edit change them and re-encodes
// them without re-signing.
func editEnvelope(tb testing.TB, env []byte, edit func(*recordpb.Envelope)) []byte {
	tb.Helper()
	var e recordpb.Envelope
	if err := gproto.Unmarshal(env, &e); err != nil {
		tb.Fatalf("Unmarshal envelope: %v", err)
	}
	edit(&e)
	b, err := gproto.Marshal(&e)
	if err != nil {
		tb.Fatalf("Marshal envelope: %v", err)
	}
	return b
}

// sizedEnvelope seals a valid offer padded so the envelope is exactly n bytes
// (n must lie where the protobuf length prefixes are 3 bytes, 16 KiB..2 MiB).
func sizedEnvelope(tb testing.TB, k crypto.PrivKey, p peer.ID, n int) []byte {
	tb.Helper()
	build := func(pad int) []byte {
		o := testOffer(p, 1, t0)
		o.Compliance = append(o.Compliance, strings.Repeat("x", pad))
		return sealRaw(tb, k, proto.OfferDomain, proto.OfferCodec, marshalOffer(tb, o))
	}
	pad := n - 4096
	b := build(pad)
	b = build(pad + n - len(b))
	if len(b) != n {
		tb.Fatalf("sized envelope is %d bytes, want %d", len(b), n)
	}
	return b
}

// offerCase is one record handed to the validator, and why it must be refused.
type offerCase struct {
	name   string
	key    string
	value  []byte
	err    error  // sentinel; nil means accepted
	reason string // RejectReason label; "" when accepted
}

func offerCases(tb testing.TB) []offerCase {
	kA, a := testKey(tb, 1)
	kB, b := testKey(tb, 2)
	keyA := proto.OfferKey(a)
	good := seal(tb, kA, testOffer(a, 1, t0))

	mutate := func(edit func(*proto.Offer)) []byte {
		o := testOffer(a, 1, t0)
		edit(o)
		return seal(tb, kA, o)
	}
	tampered := testOffer(a, 1, t0)
	tampered.Pricing.OnDemandMicros = 1 // cheaper than signed
	peerRec := peer.PeerRecordFromAddrInfo(peer.AddrInfo{ID: a})
	peerRecBytes, err := peerRec.MarshalRecord()
	if err != nil {
		tb.Fatalf("PeerRecord.MarshalRecord: %v", err)
	}

	return []offerCase{
		{name: "valid", key: keyA, value: good},
		{name: "valid/expires in exactly 24h", key: keyA, value: mutate(func(o *proto.Offer) {
			o.ExpiresUnixMs = t0.Add(market.MaxOfferTTL).UnixMilli()
		})},
		{name: "valid/created exactly 5m ahead", key: keyA, value: mutate(func(o *proto.Offer) {
			o.CreatedUnixMs = t0.Add(market.MaxClockSkew).UnixMilli()
		})},
		{name: "valid/exactly 64 KiB", key: keyA, value: sizedEnvelope(tb, kA, a, proto.MaxOfferSize)},
		{name: "valid/cc evidence", key: keyA, value: seal(tb, kA, withCCEvidence(testOffer(a, 1, t0)))},

		{name: "bad signature/first byte", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: editEnvelope(tb, good, func(e *recordpb.Envelope) { e.Signature[0] ^= 0x01 })},
		{name: "bad signature/last byte of envelope", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: func() []byte { v := bytes.Clone(good); v[len(v)-1] ^= 0x80; return v }()},
		{name: "payload tampered after signing", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: editEnvelope(tb, good, func(e *recordpb.Envelope) { e.Payload = marshalOffer(tb, tampered) })},
		{name: "signature of another key", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: editEnvelope(tb, good, func(e *recordpb.Envelope) {
				var other recordpb.Envelope
				if err := gproto.Unmarshal(seal(tb, kB, testOffer(a, 1, t0)), &other); err != nil {
					tb.Fatalf("Unmarshal: %v", err)
				}
				e.Signature = other.Signature
			})},
		{name: "key names another peer", key: proto.OfferKey(b), value: good, err: p2p.ErrOfferSigner, reason: "wrong-signer"},
		{name: "provider field is not the signer", key: keyA, err: p2p.ErrOfferSigner, reason: "wrong-signer",
			value: mutate(func(o *proto.Offer) { o.Provider = []byte(b) })},
		{name: "provider field empty", key: keyA, err: p2p.ErrOfferSigner, reason: "wrong-signer",
			value: mutate(func(o *proto.Offer) { o.Provider = nil })},
		{name: "expired", key: keyA, err: market.ErrOfferExpired, reason: "expired",
			value: mutate(func(o *proto.Offer) {
				o.CreatedUnixMs = t0.Add(-2 * time.Hour).UnixMilli()
				o.ExpiresUnixMs = t0.Add(-time.Millisecond).UnixMilli()
			})},
		{name: "expires exactly now", key: keyA, err: market.ErrOfferExpired, reason: "expired",
			value: mutate(func(o *proto.Offer) { o.ExpiresUnixMs = t0.UnixMilli() })},
		{name: "expiry more than 24h ahead", key: keyA, err: market.ErrOfferFarFuture, reason: "far-future",
			value: mutate(func(o *proto.Offer) { o.ExpiresUnixMs = t0.Add(market.MaxOfferTTL + time.Millisecond).UnixMilli() })},
		{name: "created far in the future", key: keyA, err: market.ErrOfferFromFuture, reason: "from-future",
			value: mutate(func(o *proto.Offer) { o.CreatedUnixMs = t0.Add(market.MaxClockSkew + time.Millisecond).UnixMilli() })},
		{name: "larger than 64 KiB", key: keyA, err: p2p.ErrOfferTooLarge, reason: "too-large",
			value: sizedEnvelope(tb, kA, a, proto.MaxOfferSize+1)},
		{name: "malformed protobuf payload", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: sealRaw(tb, kA, proto.OfferDomain, proto.OfferCodec, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01})},
		{name: "envelope of another domain", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: sealRaw(tb, kA, "suanli-order", proto.OfferCodec, marshalOffer(tb, testOffer(a, 1, t0)))},
		{name: "unregistered payload type", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: sealRaw(tb, kA, proto.OfferDomain, []byte("/suanli/nope/1"), marshalOffer(tb, testOffer(a, 1, t0)))},
		{name: "payload is a peer record", key: keyA, err: p2p.ErrOfferEnvelope, reason: "bad-envelope",
			value: sealRaw(tb, kA, proto.OfferDomain, peer.PeerRecordEnvelopePayloadType, peerRecBytes)},
		{name: "not an envelope", key: keyA, value: []byte("definitely not an envelope"), err: p2p.ErrOfferEnvelope, reason: "bad-envelope"},
		{name: "empty value", key: keyA, value: nil, err: p2p.ErrOfferEnvelope, reason: "bad-envelope"},
		{name: "schema: lower-case region", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Region = "cn-gz" })},
		{name: "schema: seq 0", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Seq = 0 })},
		{name: "valid/GPUs leased", key: keyA, value: mutate(func(o *proto.Offer) { leaseGPUs(o, t0) })},
		{name: "schema: GPU leased until before the offer", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Gpus[1].LeasedUntilUnixMs = o.CreatedUnixMs - 1 })},
		{name: "schema: GPU leased until negative", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Gpus[0].LeasedUntilUnixMs = -1 })},
		{name: "schema: GPU leased past the longest lease", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) {
				o.Gpus[0].LeasedUntilUnixMs = o.CreatedUnixMs + market.MaxLeaseDuration.Milliseconds() + 1
			})},
		{name: "valid/isolation container-userns", key: keyA,
			value: mutate(func(o *proto.Offer) { o.Isolation = proto.IsolationLevel_ISOLATION_LEVEL_CONTAINER_USERNS })},
		{name: "schema: isolation level unknown", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Isolation = 99 })},
		{name: "schema: isolation level negative", key: keyA, err: market.ErrOfferSchema, reason: "schema",
			value: mutate(func(o *proto.Offer) { o.Isolation = -1 })},
		{name: "price: zero on-demand", key: keyA, err: market.ErrOfferPrice, reason: "price",
			value: mutate(func(o *proto.Offer) { o.Pricing.OnDemandMicros = 0 })},
		{name: "evidence: cc level without evidence", key: keyA, err: market.ErrOfferEvidence, reason: "evidence",
			value: mutate(func(o *proto.Offer) { o.Attestation = proto.AttestationLevel_ATTESTATION_LEVEL_CC_EVIDENCE })},
		{name: "bad key/no prefix", key: "/ipns/" + string(a), value: good, err: proto.ErrBadKey, reason: "bad-key"},
		{name: "bad key/prefix without slash", key: "/suanli-offer" + string(a), value: good, err: proto.ErrBadKey, reason: "bad-key"},
		{name: "bad key/bad peer-id bytes", key: "/suanli-offer/not-a-peer-id", value: good, err: proto.ErrBadKey, reason: "bad-key"},
		{name: "bad key/empty peer id", key: "/suanli-offer/", value: good, err: proto.ErrBadKey, reason: "bad-key"},
		{name: "bad key/empty", key: "", value: good, err: proto.ErrBadKey, reason: "bad-key"},
	}
}

func TestOfferValidatorValidate(t *testing.T) {
	for _, tc := range offerCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var reasons []string
			v := p2p.OfferValidator{
				Now:      func() time.Time { return t0 },
				OnReject: func(r string) { reasons = append(reasons, r) },
			}
			err := v.Validate(tc.key, tc.value)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tc.name, err)
				}
				if len(reasons) != 0 {
					t.Errorf("OnReject got %q for an accepted record, want no call", reasons)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("Validate(%s) = %v, want %v", tc.name, err, tc.err)
			}
			if len(reasons) != 1 || reasons[0] != tc.reason {
				t.Errorf("OnReject got %q, want [%q]", reasons, tc.reason)
			}
			if got := p2p.RejectReason(err); got != tc.reason {
				t.Errorf("RejectReason(%v) = %q, want %q", err, got, tc.reason)
			}
		})
	}
}

func TestOpenOffer(t *testing.T) {
	_, a := testKey(t, 1)
	for _, tc := range offerCases(t) {
		if strings.HasPrefix(tc.name, "bad key") || tc.name == "key names another peer" {
			continue // OpenOffer does not see the DHT key
		}
		t.Run(tc.name, func(t *testing.T) {
			o, signer, err := p2p.OpenOffer(tc.value, t0)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("OpenOffer(%s) = %v, want %v", tc.name, err, tc.err)
				}
				if o != nil || signer != "" {
					t.Errorf("OpenOffer(%s) = %v, %q on error, want nil, \"\"", tc.name, o, signer)
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenOffer(%s) = %v, want nil", tc.name, err)
			}
			if signer != a {
				t.Errorf("OpenOffer(%s) signer = %s, want %s", tc.name, signer, a)
			}
			if peer.ID(o.Provider) != a || o.Seq != 1 || len(o.Gpus) != 8 {
				t.Errorf("OpenOffer(%s) offer = provider %s seq %d %d GPUs, want %s seq 1 8 GPUs", tc.name, peer.ID(o.Provider), o.Seq, len(o.Gpus), a)
			}
		})
	}
}

func TestOpenOfferRoundTrip(t *testing.T) {
	k, a := testKey(t, 1)
	want := withCCEvidence(testOffer(a, 7, t0))
	got, signer, err := p2p.OpenOffer(seal(t, k, want), t0)
	if err != nil {
		t.Fatalf("OpenOffer(sealed) = %v, want nil", err)
	}
	if signer != a {
		t.Errorf("OpenOffer(sealed) signer = %s, want %s", signer, a)
	}
	if !gproto.Equal(got, want) {
		t.Errorf("OpenOffer(sealed) = %v, want %v", got, want)
	}
}

func TestSealOfferTooLarge(t *testing.T) {
	k, a := testKey(t, 1)
	o := testOffer(a, 1, t0)
	o.Compliance = append(o.Compliance, strings.Repeat("x", proto.MaxOfferSize))
	if _, err := p2p.SealOffer(k, o); !errors.Is(err, p2p.ErrOfferTooLarge) {
		t.Errorf("SealOffer(%d-byte compliance) = %v, want %v", proto.MaxOfferSize, err, p2p.ErrOfferTooLarge)
	}
	// SealOffer and a manual seal of the same offer give the same bytes.
	o = testOffer(a, 1, t0)
	manual := sealRaw(t, k, proto.OfferDomain, proto.OfferCodec, marshalOffer(t, o))
	if got := seal(t, k, o); !bytes.Equal(got, manual) {
		t.Errorf("SealOffer = %x, want manual seal %x", got, manual)
	}
}

func TestRejectReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", p2p.ErrOfferTooLarge), "too-large"},
		{fmt.Errorf("x: %w", p2p.ErrOfferEnvelope), "bad-envelope"},
		{fmt.Errorf("x: %w", p2p.ErrOfferSigner), "wrong-signer"},
		{fmt.Errorf("x: %w", proto.ErrBadKey), "bad-key"},
		{fmt.Errorf("x: %w", market.ErrOfferExpired), "expired"},
		{fmt.Errorf("x: %w", market.ErrOfferFarFuture), "far-future"},
		{fmt.Errorf("x: %w", market.ErrOfferFromFuture), "from-future"},
		{fmt.Errorf("x: %w", market.ErrOfferSchema), "schema"},
		{fmt.Errorf("x: %w", market.ErrOfferPrice), "price"},
		{fmt.Errorf("x: %w", market.ErrOfferEvidence), "evidence"},
		{errors.New("something else"), "other"},
	} {
		if got := p2p.RejectReason(tc.err); got != tc.want {
			t.Errorf("RejectReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestOfferValidatorSelect(t *testing.T) {
	kA, a := testKey(t, 1)
	kB, _ := testKey(t, 2)
	v := p2p.OfferValidator{Now: func() time.Time { return t0 }}
	key := proto.OfferKey(a)

	offer := func(seq uint64, created time.Time, edit func(*proto.Offer)) []byte {
		o := testOffer(a, seq, t0)
		o.CreatedUnixMs = created.UnixMilli()
		if edit != nil {
			edit(o)
		}
		return seal(t, kA, o)
	}
	seq1 := offer(1, t0.Add(-3*time.Minute), nil)
	seq2 := offer(2, t0.Add(-2*time.Minute), nil)
	seq3 := offer(3, t0.Add(-4*time.Minute), nil) // highest seq, yet created earliest
	early := offer(5, t0.Add(-2*time.Minute), nil)
	late := offer(5, t0.Add(-time.Minute), nil)
	twinX := offer(6, t0.Add(-time.Minute), func(o *proto.Offer) { o.Pricing.OnDemandMicros = 2_000_000 })
	twinY := offer(6, t0.Add(-time.Minute), func(o *proto.Offer) { o.Pricing.OnDemandMicros = 3_000_000 })
	smallTwin, bigTwin := twinX, twinY
	if bytes.Compare(twinX, twinY) > 0 {
		smallTwin, bigTwin = twinY, twinX
	}
	badSig := editEnvelope(t, offer(9, t0, nil), func(e *recordpb.Envelope) { e.Signature[3] ^= 0x10 })
	expired := offer(8, t0.Add(-3*time.Hour), func(o *proto.Offer) { o.ExpiresUnixMs = t0.Add(-time.Hour).UnixMilli() })
	otherSigner := seal(t, kB, testOffer(a, 7, t0))
	tooLarge := sizedEnvelope(t, kA, a, proto.MaxOfferSize+1)

	for _, tc := range []struct {
		name   string
		values [][]byte
		want   []byte // nil: an error
	}{
		{"one", [][]byte{seq1}, seq1},
		{"highest seq wins", [][]byte{seq1, seq3, seq2}, seq3},
		{"equal seq: later created wins", [][]byte{early, late}, late},
		{"equal seq and created: smaller bytes win", [][]byte{bigTwin, smallTwin}, smallTwin},
		{"invalid values skipped", [][]byte{[]byte("garbage"), badSig, expired, seq1, otherSigner, tooLarge, seq2}, seq2},
		{"invalid with highest seq skipped", [][]byte{badSig, seq1}, seq1},
		{"all invalid", [][]byte{[]byte("garbage"), badSig, expired, otherSigner, tooLarge, nil}, nil},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, vals := range orderings(tc.values) {
				i, err := v.Select(key, vals)
				if tc.want == nil {
					if err == nil {
						t.Fatalf("Select(%d values) = %d, nil, want an error", len(vals), i)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Select(%d values) = %v, want nil", len(vals), err)
				}
				if i < 0 || i >= len(vals) || !bytes.Equal(vals[i], tc.want) {
					t.Fatalf("Select(%d values) = %d (%s), want the index of %s", len(vals), i, describe(t, vals, i), describe(t, [][]byte{tc.want}, 0))
				}
			}
		})
	}
}

// orderings returns every rotation of vs and of its reverse, so each value
// is tried in every position and after every neighbour.
func orderings(vs [][]byte) [][][]byte {
	if len(vs) == 0 {
		return [][][]byte{vs}
	}
	rev := make([][]byte, len(vs))
	for i, v := range vs {
		rev[len(vs)-1-i] = v
	}
	var out [][][]byte
	for _, base := range [][][]byte{vs, rev} {
		for i := range base {
			out = append(out, append(append([][]byte{}, base[i:]...), base[:i]...))
		}
	}
	return out
}

func describe(tb testing.TB, vals [][]byte, i int) string {
	if i < 0 || i >= len(vals) {
		return "out of range"
	}
	o, _, err := p2p.OpenOffer(vals[i], t0)
	if err != nil {
		return "invalid: " + err.Error()
	}
	return fmt.Sprintf("seq %d created %d, %d bytes", o.Seq, o.CreatedUnixMs, len(vals[i]))
}

// FuzzOpenOffer feeds raw bytes to OpenOffer: it must never panic, every
// refusal must carry a known reason, and anything accepted must be signed
// by its provider and pass the validator again.
func FuzzOpenOffer(f *testing.F) {
	kA, a := testKey(f, 1)
	kB, b := testKey(f, 2)
	good := seal(f, kA, testOffer(a, 1, t0))
	f.Add(good)
	f.Add(seal(f, kB, withEvidence(testOffer(b, 3, t0), 48, 32)))
	f.Add(seal(f, kA, leaseGPUs(testOffer(a, 2, t0), t0)))
	f.Add(sizedEnvelope(f, kA, a, proto.MaxOfferSize+1))
	f.Add(sealRaw(f, kA, proto.OfferDomain, proto.OfferCodec, []byte{0xff, 0x01, 0x02}))
	f.Add(sealRaw(f, kA, "suanli-order", proto.OfferCodec, marshalOffer(f, testOffer(a, 1, t0))))
	f.Add(editEnvelope(f, good, func(e *recordpb.Envelope) { e.Signature[0] ^= 1 }))
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	v := p2p.OfferValidator{Now: func() time.Time { return t0 }}

	f.Fuzz(func(t *testing.T, b []byte) {
		o, signer, err := p2p.OpenOffer(b, t0)
		if err != nil {
			if r := p2p.RejectReason(err); r == "other" {
				t.Fatalf("OpenOffer(%x) = %v with RejectReason %q, want a known reason", b, err, r)
			}
			if o != nil || signer != "" {
				t.Fatalf("OpenOffer(%x) = %v, %q, %v, want nil offer and signer on error", b, o, signer, err)
			}
			return
		}
		if o == nil {
			t.Fatalf("OpenOffer(%x) = nil offer, nil error", b)
		}
		if peer.ID(o.Provider) != signer {
			t.Fatalf("OpenOffer(%x) signer = %s, provider %s, want equal", b, signer, peer.ID(o.Provider))
		}
		if err := market.ValidateOffer(o, t0); err != nil {
			t.Fatalf("ValidateOffer(accepted offer) = %v, want nil", err)
		}
		if err := v.Validate(proto.OfferKey(signer), b); err != nil {
			t.Fatalf("Validate(accepted offer) = %v, want nil", err)
		}
		if len(b) > proto.MaxOfferSize {
			t.Fatalf("OpenOffer accepted %d bytes, limit %d", len(b), proto.MaxOfferSize)
		}
		checkLeasedUntil(t, o)
	})
}

// FuzzOpenOfferPayload seals fuzzed payload bytes with a real key, so the
// checks behind the signature (payload decoding, signer = provider, market
// rules) are reached, which raw-byte fuzzing of FuzzOpenOffer rarely does.
func FuzzOpenOfferPayload(f *testing.F) {
	kA, a := testKey(f, 1)
	_, b := testKey(f, 2)
	f.Add(marshalOffer(f, testOffer(a, 1, t0)))
	f.Add(marshalOffer(f, testOffer(b, 1, t0)))
	f.Add(marshalOffer(f, withEvidence(testOffer(a, 2, t0), 48, 32)))
	f.Add(marshalOffer(f, leaseGPUs(testOffer(a, 3, t0), t0)))
	f.Add(marshalOffer(f, func() *proto.Offer { o := testOffer(a, 4, t0); o.Gpus[0].LeasedUntilUnixMs = -5; return o }()))
	f.Add([]byte{0xff, 0x01})
	f.Add([]byte{})
	v := p2p.OfferValidator{Now: func() time.Time { return t0 }}

	f.Fuzz(func(t *testing.T, payload []byte) {
		env := sealRaw(t, kA, proto.OfferDomain, proto.OfferCodec, payload)
		o, signer, err := p2p.OpenOffer(env, t0)
		if err != nil {
			if r := p2p.RejectReason(err); r == "other" || r == "bad-key" {
				t.Fatalf("OpenOffer(sealed %x) = %v with RejectReason %q, want an offer reason", payload, err, r)
			}
			if len(env) <= proto.MaxOfferSize && errors.Is(err, p2p.ErrOfferTooLarge) {
				t.Fatalf("OpenOffer(%d bytes) = %v, want no size refusal", len(env), err)
			}
			return
		}
		if signer != a || peer.ID(o.Provider) != a {
			t.Fatalf("OpenOffer(sealed %x) signer %s provider %s, want %s", payload, signer, peer.ID(o.Provider), a)
		}
		if err := v.Validate(proto.OfferKey(a), env); err != nil {
			t.Fatalf("Validate(accepted offer) = %v, want nil", err)
		}
		checkLeasedUntil(t, o)
	})
}

// checkLeasedUntil fails unless every GPU of an accepted offer is free or
// leased until a time after the offer's creation, within the longest lease,
// and its capacity adds up.
func checkLeasedUntil(t *testing.T, o *proto.Offer) {
	t.Helper()
	for i, g := range o.Gpus {
		u := g.LeasedUntilUnixMs
		if u != 0 && (u <= o.CreatedUnixMs || u-o.CreatedUnixMs > market.MaxLeaseDuration.Milliseconds()) {
			t.Fatalf("accepted offer's GPU %d leased until %d, created %d", i, u, o.CreatedUnixMs)
		}
	}
	total := 0
	for _, c := range market.OfferCapacity(o, t0) {
		n := c.Free
		for _, r := range c.Releases {
			n += r.Count
		}
		if n != c.Total {
			t.Fatalf("capacity %+v: free and releases do not add up to the total", c)
		}
		total += c.Total
	}
	if total != len(o.Gpus) {
		t.Fatalf("capacity counts %d GPUs of %d", total, len(o.Gpus))
	}
}

// FuzzValidateOffer feeds protobuf payload bytes to market.ValidateOffer: it
// must never panic, every refusal must carry a known reason, and an accepted
// offer must stay accepted after a round trip through the wire format.
func FuzzValidateOffer(f *testing.F) {
	_, a := testKey(f, 1)
	f.Add(marshalOffer(f, testOffer(a, 1, t0)))
	f.Add(marshalOffer(f, withEvidence(testOffer(a, 2, t0), 48, 32)))
	bad := testOffer(a, 1, t0)
	bad.Gpus[3].Evidence = &proto.Evidence{Report: []byte{1}, Chain: []uint32{1 << 31}}
	f.Add(marshalOffer(f, bad))
	cluster := testOffer(a, 3, t0) // a Slurm cluster's offer: scheduler, nodes, span
	cluster.Scheduler, cluster.MaxNodes, cluster.Host.SchedulerVersion = "slurm", 2, "22.05.8"
	for i, g := range cluster.Gpus {
		g.Node = []string{"gpu-1", "gpu-2"}[i%2]
	}
	f.Add(marshalOffer(f, cluster))
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, b []byte) {
		o := new(proto.Offer)
		if err := gproto.Unmarshal(b, o); err != nil {
			return
		}
		err := market.ValidateOffer(o, t0)
		if err != nil {
			if r := market.OfferReason(err); r == "other" {
				t.Fatalf("ValidateOffer = %v with OfferReason %q, want a known reason", err, r)
			}
			return
		}
		if n := len(o.Gpus); n < 1 || n > market.MaxOfferGPUs {
			t.Fatalf("ValidateOffer accepted %d GPUs", n)
		}
		nodes := map[string]bool{}
		for _, g := range o.Gpus {
			nodes[g.Node] = true
		}
		if o.Scheduler != "" && (nodes[""] || o.MaxNodes < 1 || int(o.MaxNodes) > len(nodes)) || o.Scheduler == "" && (o.MaxNodes != 0 || !nodes[""]) {
			t.Fatalf("ValidateOffer accepted scheduler %q spanning %d of nodes %v", o.Scheduler, o.MaxNodes, nodes)
		}
		if exp := time.UnixMilli(o.ExpiresUnixMs); !exp.After(t0) || exp.Sub(t0) > market.MaxOfferTTL {
			t.Fatalf("ValidateOffer accepted expiry %s at %s", exp, t0)
		}
		again := new(proto.Offer)
		if err := gproto.Unmarshal(marshalOffer(t, o), again); err != nil {
			t.Fatalf("Unmarshal(Marshal(accepted)) = %v", err)
		}
		if err := market.ValidateOffer(again, t0); err != nil {
			t.Fatalf("ValidateOffer(round trip) = %v, want nil", err)
		}
	})
}

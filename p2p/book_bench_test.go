package p2p_test

// Benchmarks of DecodeBook against the Ed25519 verifies it must do, in one
// file so one run gives the ratios:
//
//	go test -run '^$' -bench 'Decode|Baseline' -benchmem -count 3 ./p2p/
//
// DecodeOrder / Ed25519VerifyBaseline is DecodeBook's overhead over its one
// verify; DecodeFill / Ed25519VerifyBaselineFill the same for a fill's three.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"testing"

	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// bookSignedLen is the length of what an envelope's signature covers:
// varint-prefixed domain, payload type and payload.
func bookSignedLen(tb testing.TB, env []byte, domain string) int {
	tb.Helper()
	var e recordpb.Envelope
	if err := gproto.Unmarshal(env, &e); err != nil {
		tb.Fatalf("Unmarshal envelope: %v", err)
	}
	n := 0
	for _, l := range []int{len(domain), len(e.PayloadType), len(e.Payload)} {
		n += binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(l)) + l
	}
	return n
}

// bookBenchVerify verifies signatures over messages of the given sizes.
func bookBenchVerify(b *testing.B, sizes ...int) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{bookMakerSeed}, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	msgs := make([][]byte, len(sizes))
	sigs := make([][]byte, len(sizes))
	for i, n := range sizes {
		msgs[i] = bytes.Repeat([]byte{byte(i + 1)}, n)
		sigs[i] = ed25519.Sign(priv, msgs[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range msgs {
			if !ed25519.Verify(pub, msgs[i], sigs[i]) {
				b.Fatal("ed25519.Verify = false, want true")
			}
		}
	}
}

// bookBenchOrder is a realistic sealed bid and its gossip message.
func bookBenchOrder(b *testing.B) (env, msg []byte) {
	m := bookKey(b, bookMakerSeed)
	env = bookSeal(b, m.key, bookOrder(m.id, proto.Side_SIDE_BID))
	return env, bookOrderMsg(b, env)
}

func bookBenchDecode(b *testing.B, msg []byte) {
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p2p.DecodeBook(msg, bookMkt, bookNow); err != nil {
			b.Fatalf("DecodeBook = %v", err)
		}
	}
}

// BenchmarkDecodeOrder decodes a gossiped bid with constraints (one verify).
func BenchmarkDecodeOrder(b *testing.B) {
	_, msg := bookBenchOrder(b)
	bookBenchDecode(b, msg)
}

// BenchmarkEd25519VerifyBaseline verifies one message as long as the
// order's signed bytes.
func BenchmarkEd25519VerifyBaseline(b *testing.B) {
	env, _ := bookBenchOrder(b)
	bookBenchVerify(b, bookSignedLen(b, env, proto.OrderDomain))
}

// BenchmarkDecodeFill decodes a gossiped fill: the Take, the taker's order
// inside it and the Accept (three verifies).
func BenchmarkDecodeFill(b *testing.B) {
	bookBenchDecode(b, bookNewTrade(b, proto.Side_SIDE_BID).msg(b))
}

// BenchmarkEd25519VerifyBaselineFill verifies three messages as long as
// the fill's three signed envelopes.
func BenchmarkEd25519VerifyBaselineFill(b *testing.B) {
	order, take, accept := bookNewTrade(b, proto.Side_SIDE_BID).seal(b)
	bookBenchVerify(b,
		bookSignedLen(b, order, proto.OrderDomain),
		bookSignedLen(b, take, proto.TakeDomain),
		bookSignedLen(b, accept, proto.AcceptDomain))
}

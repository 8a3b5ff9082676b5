package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// benchLease is an 8-GPU lease and its first countersigned receipt.
func benchLease(b *testing.B) (*proto.Lease, []byte, *proto.SignedReceipt) {
	b.Helper()
	pk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	bk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	prov, _ := peer.IDFromPrivateKey(pk)
	buyer, _ := peer.IDFromPrivateKey(bk)
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	terms := &proto.Lease{
		Id: "bafkreibenchlease", Provider: []byte(prov), Buyer: []byte(buyer), PriceMicros: 2_400_000, Currency: "USD",
		LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600, BillingIntervalS: 60,
		StartUnixMs: start.UnixMilli(), Market: "nvidia-h100-sxm5-80gb",
	}
	r := &proto.Receipt{
		LeaseId: terms.Id, Seq: 1, WindowStartUnixMs: start.UnixMilli(), WindowEndUnixMs: start.Add(time.Minute).UnixMilli(),
		Provider: []byte(prov), CreatedUnixMs: start.Add(time.Minute).UnixMilli(),
	}
	for i := range 8 {
		uuid := fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i)
		terms.Gpus = append(terms.Gpus, uuid)
		r.Usage = append(r.Usage, &proto.GPUUsage{Uuid: uuid, GpuMs: 60_000, MeanUtilizationPermille: 930, MaxMemoryUsedBytes: 70 << 30, EnergyMj: 42_000_000})
		r.GpuMs += 60_000
	}
	r.CumulativeGpuMs = r.GpuMs
	amount, err := market.Charge(terms.PriceMicros, r.GpuMs)
	if err != nil {
		b.Fatal(err)
	}
	r.AmountMicros, r.CumulativeMicros = amount, amount
	env, err := p2p.Seal(pk, r, proto.MaxReceiptSize)
	if err != nil {
		b.Fatal(err)
	}
	cs := &proto.Countersign{LeaseId: terms.Id, Seq: 1, ReceiptHash: proto.ReceiptHash(env), Buyer: []byte(buyer), CreatedUnixMs: r.CreatedUnixMs}
	csEnv, err := p2p.Seal(bk, cs, proto.MaxReceiptSize)
	if err != nil {
		b.Fatal(err)
	}
	if err := market.VerifyNext(terms, nil, r, proto.ReceiptHash(env), start.Add(2*time.Minute)); err != nil {
		b.Fatalf("benchmark receipt is not valid: %v", err)
	}
	return terms, env, &proto.SignedReceipt{Receipt: env, Countersign: csEnv}
}

func benchStore(b *testing.B) *store.Store {
	b.Helper()
	s, err := store.Open(b.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkReceiptPersist stores countersigned receipts the way both
// parties do: marshal, one Badger transaction, synced to disk.
func BenchmarkReceiptPersist(b *testing.B) {
	_, _, sr := benchLease(b)
	s := benchStore(b)
	size, _ := gproto.MarshalOptions{Deterministic: true}.Marshal(sr)
	b.SetBytes(int64(len(size)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.PutReceipt("bafkreibenchlease", uint64(i+1), sr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBadgerSyncedWrite is the baseline of BenchmarkReceiptPersist:
// raw Badger synced writes of a value of the same size under a key of the
// same shape.
func BenchmarkBadgerSyncedWrite(b *testing.B) {
	_, _, sr := benchLease(b)
	db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	val, _ := gproto.Marshal(sr)
	b.SetBytes(int64(len(val)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := binary.BigEndian.AppendUint64([]byte("receipt/bafkreibenchlease/"), uint64(i+1))
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key, val) }); err != nil {
			b.Fatal(err)
		}
		if err := db.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiptVerify is the buyer's check of a receipt before it
// countersigns: open the envelope (signature over the received bytes) and
// the market's chain, window and amount rules.
func BenchmarkReceiptVerify(b *testing.B) {
	terms, env, _ := benchLease(b)
	now := time.UnixMilli(terms.StartUnixMs).Add(2 * time.Minute)
	b.SetBytes(int64(len(env)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, signer, err := p2p.Open[*proto.Receipt](env, proto.MaxReceiptSize)
		if err != nil || string(signer) != string(terms.Provider) {
			b.Fatal(err)
		}
		if err := market.VerifyNext(terms, nil, r, proto.ReceiptHash(env), now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEd25519VerifyReceiptBaseline is one raw Ed25519 verify of a
// message the size of the receipt envelope: the baseline of
// BenchmarkReceiptVerify.
func BenchmarkEd25519VerifyReceiptBaseline(b *testing.B) {
	_, env, _ := benchLease(b)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	sig := ed25519.Sign(priv, env)
	b.SetBytes(int64(len(env)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !ed25519.Verify(pub, env, sig) {
			b.Fatal("verify failed")
		}
	}
}

package p2p

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	recordpb "github.com/libp2p/go-libp2p/core/record/pb"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// TestVerifiedSkipsTheVerify shows what the cache saves and why only
// checked envelopes may enter it: bytes whose signature is broken are
// refused by OpenWith, but the same bytes planted in the cache as if
// checked are opened without a verify.
func TestVerifiedSkipsTheVerify(t *testing.T) {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	now := time.Now()
	o := &proto.Cancel{Maker: []byte(id), Market: "nvidia-h100-sxm5-80gb", OrderId: "x", CreatedUnixMs: now.UnixMilli()}
	env, err := Seal(k, o, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	var e recordpb.Envelope
	if err := gproto.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	e.Signature[0] ^= 1
	bad, err := gproto.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerified(4)
	if _, _, err := OpenWith[*proto.Cancel](v, bad, proto.MaxBookMessageSize); err == nil {
		t.Fatal("a broken signature was accepted")
	}
	v.add(verifiedKey{sha256.Sum256(bad), proto.CancelDomain}, id)
	c, signer, err := OpenWith[*proto.Cancel](v, bad, proto.MaxBookMessageSize)
	if err != nil || signer != id || c.OrderId != "x" {
		t.Fatalf("planted entry: OpenWith = %v, %s, %v; want the cancel, unverified", c, signer, err)
	}
}

package p2p_test

import (
	"errors"
	"testing"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
)

// TestOpenOfferInterned: the same sealed bytes, opened twice (from two
// copies, as two replicas or two asks receive them), give the very same
// decoded offer; a cached offer is still checked at the caller's time
// (expired: refused); bytes that differ are opened on their own.
func TestOpenOfferInterned(t *testing.T) {
	k, a := testKey(t, 1)
	env := seal(t, k, withCCEvidence(testOffer(a, 11, t0)))
	o1, s1, err := p2p.OpenOffer(append([]byte(nil), env...), t0)
	if err != nil {
		t.Fatal(err)
	}
	o2, s2, err := p2p.OpenOffer(append([]byte(nil), env...), t0)
	if err != nil {
		t.Fatal(err)
	}
	if o1 != o2 || s1 != s2 || s1 != a {
		t.Errorf("opened twice: offers %p and %p, signers %s and %s; want one shared offer signed by %s", o1, o2, s1, s2, a)
	}
	if _, _, err := p2p.OpenOffer(env, t0.Add(2*time.Hour)); !errors.Is(err, market.ErrOfferExpired) {
		t.Errorf("interned offer opened after its expiry = %v, want %v", err, market.ErrOfferExpired)
	}
	other := seal(t, k, withCCEvidence(testOffer(a, 12, t0)))
	o3, _, err := p2p.OpenOffer(other, t0)
	if err != nil {
		t.Fatal(err)
	}
	if o3 == o1 || o3.Seq != 12 {
		t.Errorf("a different offer opened as %p seq %d, want its own (seq 12)", o3, o3.Seq)
	}
	// A forged copy (one byte of the signature flipped) is not the
	// interned one: it is verified, and refused.
	forged := append([]byte(nil), env...)
	forged[len(forged)-1] ^= 1
	if _, _, err := p2p.OpenOffer(forged, t0); !errors.Is(err, p2p.ErrEnvelope) {
		t.Errorf("forged copy of an interned offer = %v, want %v", err, p2p.ErrEnvelope)
	}
}

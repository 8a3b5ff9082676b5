package resale

import "testing"

// TestClaims: a holder hands a lease over to one taker at a time; the
// claims are each Manager's (they were a package-level map shared by every
// node of the process), and a released claim may be taken again.
func TestClaims(t *testing.T) {
	a, b := New(Config{}), New(Config{})
	release, ok := a.claim("lease-1")
	if !ok {
		t.Fatal("a first claim was refused")
	}
	if _, ok := a.claim("lease-1"); ok {
		t.Fatal("a second claim of a lease being handed over was granted")
	}
	if rb, ok := b.claim("lease-1"); !ok {
		t.Fatal("another node's claim of the same lease ID was refused: claims are shared")
	} else {
		rb()
	}
	if r2, ok := a.claim("lease-2"); !ok {
		t.Fatal("a claim of another lease was refused")
	} else {
		r2()
	}
	release()
	if r, ok := a.claim("lease-1"); !ok {
		t.Fatal("a claim after the release was refused")
	} else {
		r()
	}
}

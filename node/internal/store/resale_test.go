package store

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/suanli/suanli/proto"
)

// TestHandoverOnce: the provider's store takes one handover of a lease,
// whoever asks and however many at once; the others are refused as
// already resold, and a failed handover can be undone.
func TestHandoverOnce(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nl := func(id string) *proto.Lease { return &proto.Lease{Id: id, Provider: []byte("p"), Buyer: []byte("b")} }
	rep := &proto.ResaleReply{Handover: []byte("h"), Accept: []byte("a")}
	if err := s.PutHandover("L", nl("new1"), rep); err != nil {
		t.Fatal(err)
	}
	if err := s.PutHandover("L", nl("new2"), rep); !errors.Is(err, ErrHandedOver) {
		t.Errorf("second handover = %v, want ErrHandedOver", err)
	}
	if _, err := s.GetLease("new2"); err == nil {
		t.Error("the refused handover's lease terms were stored")
	}
	if got, err := s.HandoverOf("L"); err != nil || got == nil || string(got.Accept) != "a" {
		t.Errorf("handoverOf = %+v, %v; want the first", got, err)
	}

	var wg sync.WaitGroup
	var won atomic.Int32
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.PutHandover("M", nl("m"+string(rune('a'+i))), rep) == nil {
				won.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d of 16 concurrent handovers of one lease stored, want 1", won.Load())
	}

	s.DropHandover("L", "new1")
	if got, _ := s.HandoverOf("L"); got != nil {
		t.Errorf("handover after drop = %+v, want none", got)
	}
}

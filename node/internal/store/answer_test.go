package store

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

// TestAcceptedTakeOnce: a take's accept and its lease are stored together
// once; a second accept of the same take ID, or one whose lease ID is
// already stored, is refused with ErrAnswered and rewrites nothing, and
// the answer survives a reopen.
func TestAcceptedTakeOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := &proto.Lease{Id: "take-1", Market: "m", Gpus: []string{"g0"}, PriceMicros: 100}
	if err := s.PutAcceptedTake(first, []byte("accept-1"), nil); err != nil {
		t.Fatal(err)
	}
	replay := &proto.Lease{Id: "take-1", Market: "m", Gpus: []string{"g1", "g2"}, PriceMicros: 1}
	if err := s.PutAcceptedTake(replay, []byte("accept-2"), nil); !errors.Is(err, ErrAnswered) {
		t.Fatalf("second accept of one take = %v, want ErrAnswered", err)
	}
	// A lease stored some other way under the ID blocks an answer too.
	if err := s.PutLease(&proto.Lease{Id: "take-2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAcceptedTake(&proto.Lease{Id: "take-2", Gpus: []string{"g3"}}, []byte("x"), nil); !errors.Is(err, ErrAnswered) {
		t.Fatalf("accept over a stored lease = %v, want ErrAnswered", err)
	}
	if _, err := s.TakeAnswer("take-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("answer of a refused accept = %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.TakeAnswer("take-1")
	if err != nil || !bytes.Equal(got, []byte("accept-1")) {
		t.Fatalf("answer after reopen = %q, %v; want the first", got, err)
	}
	l, err := s.GetLease("take-1")
	if err != nil || len(l.Gpus) != 1 || l.Gpus[0] != "g0" || l.PriceMicros != 100 {
		t.Fatalf("lease after a replayed accept = %v, %v; want the first terms", l, err)
	}
}

// TestAcceptedTakeWithHold: a maker's unsynced hold is in force at once
// (another lease cannot take the GPUs) and PutAcceptedTake writes it again
// with the lease, so both are there after a reopen; if another lease
// holds the GPUs by then, PutAcceptedTake stores nothing at all.
func TestAcceptedTakeWithHold(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	h := BlockHold{GPUs: []string{"g5"}, Lease: "take-3", From: now, End: now.Add(time.Hour)}
	if err := s.HoldUnsynced(h); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveGPUs([]string{"g5"}, "other", now.Add(time.Hour)); err == nil {
		t.Fatal("another lease reserved a GPU under an unsynced hold")
	}
	if err := s.PutAcceptedTake(&proto.Lease{Id: "take-3", Gpus: h.GPUs}, []byte("accept-3"), &h); err != nil {
		t.Fatal(err)
	}

	// The GPU changes hands between the hold and the accept: the accept
	// and its lease are not stored.
	h4 := BlockHold{GPUs: []string{"g6"}, Lease: "take-4", From: now, End: now.Add(time.Hour)}
	if err := s.HoldUnsynced(h4); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseGPUs(h4.GPUs, "take-4"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveGPUs(h4.GPUs, "thief", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAcceptedTake(&proto.Lease{Id: "take-4", Gpus: h4.GPUs}, []byte("accept-4"), &h4); err == nil {
		t.Fatal("accepted a take whose GPUs another lease holds")
	}
	if _, err := s.TakeAnswer("take-4"); !errors.Is(err, ErrNotFound) {
		t.Errorf("answer of a refused accept = %v, want ErrNotFound", err)
	}
	if _, err := s.GetLease("take-4"); !errors.Is(err, ErrNotFound) {
		t.Errorf("lease of a refused accept = %v, want ErrNotFound", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	holds, err := s.GPUHolds(now)
	if err != nil {
		t.Fatal(err)
	}
	if holds["g5"].Lease != "take-3" || holds["g6"].Lease != "thief" {
		t.Errorf("holds after reopen: g5 %+v, g6 %+v; want take-3 and thief", holds["g5"], holds["g6"])
	}
	if _, err := s.GetLease("take-3"); err != nil {
		t.Errorf("accepted lease after reopen: %v", err)
	}
}

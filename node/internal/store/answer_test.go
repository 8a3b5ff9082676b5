package store

import (
	"bytes"
	"errors"
	"testing"

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
	if err := s.PutAcceptedTake(first, []byte("accept-1")); err != nil {
		t.Fatal(err)
	}
	replay := &proto.Lease{Id: "take-1", Market: "m", Gpus: []string{"g1", "g2"}, PriceMicros: 1}
	if err := s.PutAcceptedTake(replay, []byte("accept-2")); !errors.Is(err, ErrAnswered) {
		t.Fatalf("second accept of one take = %v, want ErrAnswered", err)
	}
	// A lease stored some other way under the ID blocks an answer too.
	if err := s.PutLease(&proto.Lease{Id: "take-2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAcceptedTake(&proto.Lease{Id: "take-2", Gpus: []string{"g3"}}, []byte("x")); !errors.Is(err, ErrAnswered) {
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

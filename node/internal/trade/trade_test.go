package trade

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/proto"
)

var (
	t0     = time.Unix(1_800_000_000, 0)
	accept = &proto.TradeReply{Body: &proto.TradeReply_Accept{Accept: []byte("accept")}}
	reject = &proto.TradeReply{Body: &proto.TradeReply_Reject{Reject: []byte("reject")}}
)

// TestAnswersStateMachine drives the maker's states of a take (package
// doc) one message at a time: each row is a take arriving (claim) or the
// first answer being set (settle), and what the maker must do.
func TestAnswersStateMachine(t *testing.T) {
	type step struct {
		name   string
		op     string // claim, settle
		id     string
		from   peer.ID
		at     time.Duration // after t0
		reply  *proto.TradeReply
		first  bool              // claim: the caller must answer
		answer *proto.TradeReply // claim of a settled take: the answer it gets
	}
	until := time.Minute // each take is fresh until t0 + 1 min
	steps := []step{
		{name: "new take: answer it", op: "claim", id: "t1", from: "p", first: true},
		{name: "same take while answering: wait", op: "claim", id: "t1", from: "p", at: time.Second},
		{name: "first answer: accept", op: "settle", id: "t1", reply: accept},
		{name: "accepted, same take: the accept", op: "claim", id: "t1", from: "p", at: 2 * time.Second, answer: accept},
		{name: "accepted, same take over another stream: the accept", op: "claim", id: "t1", from: "p", at: 3 * time.Second, answer: accept},
		{name: "another take: answer it", op: "claim", id: "t2", from: "p", at: 4 * time.Second, first: true},
		{name: "first answer: reject", op: "settle", id: "t2", reply: reject},
		{name: "rejected, same take: the reject", op: "claim", id: "t2", from: "p", at: 5 * time.Second, answer: reject},
		{name: "no longer fresh: forgotten (the node refuses it as stale first)", op: "claim", id: "t2", from: "p", at: until + time.Second, first: true},
	}
	var a Answers
	claimed := map[string]*Answer{}
	for _, s := range steps {
		switch s.op {
		case "claim":
			e, first, err := a.Claim(s.id, s.from, t0.Add(until), t0.Add(s.at))
			if err != nil || first != s.first {
				t.Fatalf("%s: first=%v err=%v, want first=%v", s.name, first, err, s.first)
			}
			if first {
				claimed[s.id] = e
				continue
			}
			if e != claimed[s.id] {
				t.Fatalf("%s: a different answer than the first", s.name)
			}
			if s.answer != nil {
				if got := e.Wait(t.Context()); got != s.answer {
					t.Fatalf("%s: answered %v, want %v", s.name, got, s.answer)
				}
			} else if e.Settled() {
				t.Fatalf("%s: settled before its first answer", s.name)
			}
		case "settle":
			a.Settle(claimed[s.id], s.reply)
		}
	}
}

// TestAnswersBoundedPerPeer: one peer keeps at most MaxPerPeer answers,
// the oldest settled going first; with all in flight a new take is
// refused, while another peer is not.
func TestAnswersBoundedPerPeer(t *testing.T) {
	var a Answers
	until := t0.Add(time.Minute)
	e, _, _ := a.Claim("t1", "p", until, t0)
	a.Settle(e, reject)
	for i := 2; i <= MaxPerPeer; i++ {
		if _, first, err := a.Claim(fmt.Sprint("t", i), "p", until, t0); err != nil || !first {
			t.Fatalf("claim %d: first=%v err=%v", i, first, err)
		}
	}
	if _, _, err := a.Claim("new", "p", until, t0); err != nil {
		t.Fatalf("claim over the cap with a settled answer: %v", err)
	}
	if a.Kept("t1") {
		t.Fatal("the oldest settled answer is still kept past the cap")
	}
	if _, _, err := a.Claim("more", "p", until, t0); !errors.Is(err, ErrTooManyTakes) {
		t.Fatalf("claim with %d in flight = %v, want ErrTooManyTakes", MaxPerPeer, err)
	}
	if _, first, err := a.Claim("t1", "q", until, t0); err != nil || !first {
		t.Fatalf("another peer's claim: first=%v err=%v", first, err)
	}
	if got := a.Len(); got != MaxPerPeer+1 {
		t.Fatalf("%d answers kept, want %d", got, MaxPerPeer+1)
	}
	// Past their freshness, settled answers are swept.
	if _, _, err := a.Claim("later", "q", t0.Add(3*time.Minute), t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if a.Kept("t1") && a.Len() > MaxPerPeer+2 {
		t.Fatalf("%d answers kept after a sweep", a.Len())
	}
}

func TestFresh(t *testing.T) {
	const maxAge, skew = 5 * time.Minute, 5 * time.Minute
	for _, c := range []struct {
		name    string
		created time.Time
		fresh   bool
	}{
		{"now", t0, true},
		{"oldest allowed", t0.Add(-maxAge), true},
		{"a millisecond too old", t0.Add(-maxAge - time.Millisecond), false},
		{"ahead by the skew", t0.Add(skew), true},
		{"a millisecond past the skew", t0.Add(skew + time.Millisecond), false},
		{"1970", time.UnixMilli(0), false},
	} {
		if got := Fresh(c.created, t0, maxAge, skew) == ""; got != c.fresh {
			t.Errorf("%s: fresh = %v, want %v", c.name, got, c.fresh)
		}
	}
}

// TestInflightCounts: a take counted under a key ends by its key or, once
// named, by its take ID, once; counts of one order add up.
func TestInflightCounts(t *testing.T) {
	var f Inflight
	f.Add("k1", "o", 2)
	f.Add("k2", "o", 1)
	f.Add("k2", "o", 5) // the same key twice counts once
	f.Name("k1", "take-1")
	if got := f.Of("o"); got != 3 {
		t.Fatalf("in flight %d, want 3", got)
	}
	f.Done("take-1")
	f.Done("k1") // already ended
	if got := f.Of("o"); got != 1 {
		t.Fatalf("in flight after one ended %d, want 1", got)
	}
	f.Done("k2")
	if f.Of("o") != 0 || f.Len() != 0 {
		t.Fatalf("left: %d GPUs, %d takes", f.Of("o"), f.Len())
	}
}

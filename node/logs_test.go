package node_test

import (
	"strings"
	"testing"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// TestLeaseLogCap: a workload (or a provider) that streams without end
// cannot fill the buyer's disk: the buyer keeps at most its log cap of the
// newest output, says how many chunks it dropped, and pages what it keeps.
func TestLeaseLogCap(t *testing.T) {
	const capBytes = 2 << 20
	provider, buyer := startLeaseNet(t, node.WithExecutors("reserve", "process"), node.WithLogCap(capBytes))
	ctx := marketCtx(t)
	// 6 MiB of output, then a last line; the lease ends when the command
	// does (a loaded machine may need a while to stream it).
	id := trade(t, ctx, provider, buyer, "120s", "sh", "-c", `head -c 6291456 /dev/zero | tr '\0' x; echo; echo END-OF-OUTPUT`)

	type read struct {
		pages, chunks int
		bytes         int
		dropped       uint64
		firstMore     bool
		tail          string
	}
	readAll := func() (read, error) {
		var r read
		var after uint64
		for {
			v, err := buyer.Logs(ctx, id, after)
			if err != nil {
				return r, err
			}
			if r.pages == 0 {
				r.dropped, r.firstMore = v.Dropped, v.More
			}
			r.pages++
			for _, c := range v.Chunks {
				r.chunks++
				r.bytes += len(c.Data)
				r.tail = (r.tail + c.Data)[max(0, len(r.tail)+len(c.Data)-64):]
			}
			after = v.Next
			if !v.More {
				return r, nil
			}
		}
	}
	var got read
	waitFor(t, ctx, "the last line of output on the buyer", func() (bool, string) {
		var err error
		got, err = readAll()
		return err == nil && strings.Contains(got.tail, "END-OF-OUTPUT"), sprint(got, err)
	})
	// The output is complete now; a read that began before its last chunks
	// (and trims) came may have spanned them, so read it again, still.
	got, err := readAll()
	if err != nil {
		t.Fatal(err)
	}
	if got.bytes > capBytes {
		t.Errorf("the buyer keeps %d bytes of output, want at most the cap %d", got.bytes, capBytes)
	}
	if got.bytes < capBytes/2 {
		t.Errorf("the buyer keeps %d bytes of output, want the newest %d or so", got.bytes, capBytes*3/4)
	}
	if got.dropped == 0 {
		t.Errorf("Logs(0).Dropped = 0, want the chunks trimmed under the cap counted")
	}
	if !got.firstMore || got.pages < 2 {
		t.Errorf("read %d pages (first More=%v), want over 1 MiB paged", got.pages, got.firstMore)
	}
	// Negative control: a page is a page: from the last seq, nothing more.
	var last api.LogsView
	last, err = buyer.Logs(ctx, id, ^uint64(0)-1)
	if err != nil || len(last.Chunks) != 0 || last.Dropped != 0 {
		t.Errorf("Logs(after the end) = %+v, %v; want nothing", last, err)
	}
}

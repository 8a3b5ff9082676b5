package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// A close notice travels signed: a proto.CloseNotice sealed in a libp2p
// envelope of its own domain by the party that ended the lease, so that
// only the lease's counterparty can end a lease here (the stream's peer
// and the envelope's signer must both be it) and what it said is kept
// as it signed it. The notice a node owes is kept unsigned in its record
// (leases.Record.CloseOwed) and sealed at each send.

// errCloseSchema is a close notice whose fields make no sense.
var errCloseSchema = errors.New("lease: malformed close notice")

// SealClose signs c as key's party's notice, created at now.
func SealClose(key crypto.PrivKey, c leases.CloseNotice, now time.Time) ([]byte, error) {
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	m := &proto.CloseNotice{LeaseId: c.Lease, Signer: []byte(self), Reason: uint32(c.Reason), AtUnixMs: c.AtMs,
		Note: truncate(c.Note, 512), CreatedUnixMs: now.UnixMilli()}
	return p2p.Seal(key, m, proto.MaxCloseNoticeSize)
}

// openClose opens a sealed close notice and checks its form: a lease, a
// close reason, a time, a note within its bound, and the signer it names
// the one that signed it. It returns the notice and its signer; which
// lease and party it may close is the caller's to check.
func openClose(b []byte) (leases.CloseNotice, peer.ID, error) {
	m, signer, err := p2p.Open[*proto.CloseNotice](b, proto.MaxCloseNoticeSize)
	if err != nil {
		return leases.CloseNotice{}, "", fmt.Errorf("close notice: %w", err)
	}
	switch {
	case string(m.Signer) != string(signer):
		return leases.CloseNotice{}, "", fmt.Errorf("%w: names %q as its signer, signed by %s", p2p.ErrSigner, m.Signer, signer)
	case m.LeaseId == "":
		return leases.CloseNotice{}, "", fmt.Errorf("%w: no lease", errCloseSchema)
	case m.Reason < uint32(market.CloseCompleted) || m.Reason > uint32(market.CloseResold):
		return leases.CloseNotice{}, "", fmt.Errorf("%w: reason %d", errCloseSchema, m.Reason)
	case m.AtUnixMs <= 0:
		return leases.CloseNotice{}, "", fmt.Errorf("%w: no close time", errCloseSchema)
	case len(m.Note) > 512:
		return leases.CloseNotice{}, "", fmt.Errorf("%w: note of %d bytes", errCloseSchema, len(m.Note))
	}
	return leases.CloseNotice{Lease: m.LeaseId, Reason: market.CloseReason(m.Reason), AtMs: m.AtUnixMs, Note: m.Note}, signer, nil
}

// closeRejectReason labels a notice openClose refused: bad-envelope,
// too-large, wrong-signer or malformed.
func closeRejectReason(err error) string {
	if errors.Is(err, errCloseSchema) {
		return "malformed"
	}
	return p2p.BookReason(err)
}

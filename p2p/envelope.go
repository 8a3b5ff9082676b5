package p2p

import (
	"bytes"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/suanli/suanli/proto"
)

// Seal signs m with key into a libp2p signed envelope of m's own domain and
// payload type, and returns the envelope bytes: the exact bytes that travel
// and that name the object (proto.CIDOf).
func Seal[M proto.Signed](key crypto.PrivKey, m M, limit int) ([]byte, error) {
	env, err := record.Seal(&proto.Record[M]{Msg: m}, key)
	if err != nil {
		return nil, fmt.Errorf("p2p: seal %s: %w", m.EnvelopeDomain(), err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("p2p: marshal %s envelope: %w", m.EnvelopeDomain(), err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("%w: %s of %d bytes, limit %d", ErrTooLarge, m.EnvelopeDomain(), len(b), limit)
	}
	return b, nil
}

// Open verifies a sealed envelope of M's kind: size, the signature over the
// very bytes received, domain and payload type. It returns the message and
// its signer; the caller checks the signer has the right to sign it.
func Open[M proto.Signed](b []byte, limit int) (M, peer.ID, error) {
	var zero M
	if len(b) > limit {
		return zero, "", fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), limit)
	}
	env, rec, err := record.ConsumeEnvelope(b, zero.EnvelopeDomain())
	if err != nil {
		return zero, "", fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	// Only Ed25519 identities sign in Suanli, and only the canonical
	// encoding of an envelope is accepted: appended unknown fields would
	// leave the signature valid but give one object several names (CIDs).
	if env.PublicKey.Type() != crypto.Ed25519 {
		return zero, "", fmt.Errorf("%w: signed with a %v key, want Ed25519", ErrEnvelope, env.PublicKey.Type())
	}
	if canon, err := env.Marshal(); err != nil || !bytes.Equal(canon, b) {
		return zero, "", fmt.Errorf("%w: not the canonical encoding of its envelope", ErrEnvelope)
	}
	r, ok := rec.(*proto.Record[M])
	if !ok {
		return zero, "", fmt.Errorf("%w: payload is %T, want %s", ErrEnvelope, rec, zero.EnvelopeDomain())
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return zero, "", fmt.Errorf("%w: signer key: %v", ErrEnvelope, err)
	}
	return r.Msg, signer, nil
}

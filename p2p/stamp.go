package p2p

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Maker stamps: what a fresh key lacks.
//
// A key costs nothing to make, so a replica cannot tell an honest maker it
// has never seen from a Sybil's throwaway key by the key alone. A stamp is
// an S/Kademlia-style puzzle bound to the peer ID: a nonce such that
// SHA-256(stampDomain || ID || nonce) starts with at least StampBits zero
// bits. Grinding one costs about 2^bits hashes (DefaultStampBits: seconds
// of one core), once per identity; checking it costs one hash. The stamp
// travels beside each order of its maker (proto.BookMessage.maker_stamp)
// and is not signed: the hash binds it to the maker's ID, so it is worth
// nothing to any other key. Replicas admit stamped new makers in a lane of
// their own (node/internal/exchange, admission.go), which a flood of free
// keys cannot drain.
const (
	// DefaultStampBits is the work of a real daemon's stamp: 2^24
	// SHA-256s, about 1.5 s of one core here (BenchmarkGrindStamp).
	DefaultStampBits = 24
	// MaxStampBits bounds what GrindStamp accepts: past it a stamp would
	// take days.
	MaxStampBits = 40
	// StampSize is the length of a stamp: an 8-byte nonce.
	StampSize = 8
)

// stampDomain separates stamp hashes from any other use of SHA-256 over a
// peer ID.
const stampDomain = "suanli/maker-stamp/1\x00"

// ErrStampBits is returned by GrindStamp for bits outside [0, MaxStampBits].
var ErrStampBits = errors.New("p2p: stamp bits out of range")

// CheckStampBits returns ErrStampBits unless 0 <= bits <= MaxStampBits.
func CheckStampBits(bits int) error {
	if bits < 0 || bits > MaxStampBits {
		return fmt.Errorf("%w: %d (want 0..%d)", ErrStampBits, bits, MaxStampBits)
	}
	return nil
}

// StampWork is the number of leading zero bits of stamp's hash for id: the
// work it proves. A stamp that is not StampSize bytes proves none.
func StampWork(id peer.ID, stamp []byte) int {
	if len(stamp) != StampSize {
		return 0
	}
	buf := make([]byte, 0, len(stampDomain)+len(id)+StampSize)
	buf = append(append(append(buf, stampDomain...), id...), stamp...)
	return leadingZeros(sha256.Sum256(buf))
}

// VerifyStamp reports whether stamp proves at least bits of work for id.
// With bits <= 0 any stamp of the right size does.
func VerifyStamp(id peer.ID, stamp []byte, bits int) bool {
	return len(stamp) == StampSize && StampWork(id, stamp) >= bits
}

// GrindStamp finds a stamp of at least bits for id, starting from a random
// nonce; it checks ctx every 2^16 hashes.
func GrindStamp(ctx context.Context, id peer.ID, bits int) ([]byte, error) {
	if err := CheckStampBits(bits); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, len(stampDomain)+len(id)+StampSize)
	buf = append(append(buf, stampDomain...), id...)
	at := len(buf)
	buf = buf[:at+StampSize]
	var start [8]byte
	if _, err := rand.Read(start[:]); err != nil {
		return nil, err
	}
	nonce := binary.BigEndian.Uint64(start[:])
	for i := uint64(0); ; i++ {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		binary.BigEndian.PutUint64(buf[at:], nonce+i)
		if leadingZeros(sha256.Sum256(buf)) >= bits {
			return append([]byte(nil), buf[at:]...), nil
		}
	}
}

func leadingZeros(sum [sha256.Size]byte) int {
	n := 0
	for i := 0; i < len(sum); i += 8 {
		w := binary.BigEndian.Uint64(sum[i:])
		n += bits.LeadingZeros64(w)
		if w != 0 {
			break
		}
	}
	return n
}

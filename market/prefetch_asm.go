//go:build amd64 || arm64

package market

import "unsafe"

// prefetch asks the CPU to bring p's cache line in without waiting for
// it: unlike a load whose value is thrown away (what the book did before),
// the instruction retires at once, so a miss does not hold up the
// instructions behind it. PREFETCHT0 on amd64, PRFM PLDL1KEEP on arm64
// (prefetch_*.s); a hint either way, which never faults.
//
//go:noescape
func prefetch(p unsafe.Pointer)

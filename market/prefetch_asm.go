//go:build amd64 || arm64

package market

import "unsafe"

// prefetch2 and prefetch4 ask the CPU to bring each pointer's cache line
// in without waiting for it: unlike a load whose value is thrown away
// (what the book did before), the instruction retires at once, so a miss
// does not hold up the instructions behind it. PREFETCHT0 on amd64, PRFM
// PLDL1KEEP on arm64 (prefetch_*.s); a hint either way, which never
// faults. The lines a step needs are asked for in one call: a call to
// assembly is not inlined and goes through an ABI wrapper.
//
//go:noescape
func prefetch2(a, b unsafe.Pointer)

//go:noescape
func prefetch4(a, b, c, d unsafe.Pointer)

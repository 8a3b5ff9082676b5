package market

import "unsafe"

// prefetch asks the CPU to bring p's cache line in without waiting for
// it: unlike a load whose value is thrown away (what the book did before),
// the instruction retires at once, so a miss does not hold up the
// instructions behind it.
//
//go:noescape
func prefetch(p unsafe.Pointer)

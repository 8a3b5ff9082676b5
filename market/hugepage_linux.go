package market

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back the n bytes at p with huge pages
// (MADV_HUGEPAGE) when transparent huge pages are enabled "madvise": a
// large table probed at random then costs one TLB entry per 2 MB instead
// of one per 4 KB. Only a hint: an error (no THP, an old kernel) is
// ignored and the memory works as before.
func adviseHuge(p unsafe.Pointer, n uintptr) {
	const huge = 2 << 20
	beg := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + n) &^ (huge - 1)
	if end <= beg {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, beg-uintptr(p))), end-beg), syscall.MADV_HUGEPAGE)
}

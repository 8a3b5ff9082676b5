package market

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Go
// runs Linux on with THP (amd64, arm64 with 4 KB base pages).
const hugePage = 2 << 20

// hugeSlice returns a zeroed slice of n Ts for a table probed at random.
// When it spans a huge page or more, it starts on a huge-page boundary
// (up to 2 MB more is allocated and left unused) and the kernel is asked
// to back it with huge pages (MADV_HUGEPAGE, honoured when transparent
// huge pages are "always" or "madvise"): a random probe then costs one TLB
// entry per 2 MB instead of one per 4 KB, and in a VM a TLB miss is a
// two-level page walk. Only a hint: if the kernel refuses, the memory
// works as before. Smaller tables are plain slices.
func hugeSlice[T any](n int) []T {
	size := unsafe.Sizeof(*new(T))
	if size == 0 || uintptr(n)*size < hugePage {
		return make([]T, n)
	}
	if hugePage%size != 0 {
		// Elements straddle huge pages anyway: advise the whole ones
		// inside the slice.
		s := make([]T, n)
		p := uintptr(unsafe.Pointer(&s[0]))
		skip := (p+hugePage-1)&^(hugePage-1) - p
		if end := (uintptr(n)*size - skip) &^ (hugePage - 1); end > 0 {
			b := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), uintptr(n)*size)
			_ = syscall.Madvise(b[skip:skip+end], syscall.MADV_HUGEPAGE)
		}
		return s
	}
	pad := int(hugePage / size)
	s := make([]T, n+pad)
	p := uintptr(unsafe.Pointer(&s[0]))
	// Large objects start on a page boundary, a multiple of size (a power
	// of two that divides 2 MB): the skip is whole elements.
	off := int(((p+hugePage-1)&^(hugePage-1) - p) / size)
	s = s[off : off+n : off+n]
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), uintptr(n)*size&^(hugePage-1)), syscall.MADV_HUGEPAGE)
	return s
}

// populate asks the kernel to back s with memory now, in one call, instead
// of one page fault per page as it is first written (MADV_POPULATE_WRITE,
// Linux 5.14; older kernels refuse it and s faults in as before). Only for
// slices of populateMin bytes or more, which Go places on a page boundary,
// as madvise needs. It changes no byte of s.
func populate[T any](s []T) []T {
	size := uintptr(len(s)) * unsafe.Sizeof(*new(T))
	if size < populateMin {
		return s
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	if uintptr(p)&4095 == 0 {
		_ = syscall.Madvise(unsafe.Slice((*byte)(p), size), madvPopulateWrite)
	}
	return s
}

const (
	populateMin       = 64 << 10
	madvPopulateWrite = 23
)

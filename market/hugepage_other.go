//go:build !linux

package market

import "unsafe"

// adviseHuge is a no-op where there is no MADV_HUGEPAGE.
func adviseHuge(p unsafe.Pointer, n uintptr) {}

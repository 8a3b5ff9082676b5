//go:build !amd64 && !arm64

package market

import "unsafe"

// prefetch2 and prefetch4 do nothing here: no prefetch instruction is
// wired up.
func prefetch2(a, b unsafe.Pointer)       {}
func prefetch4(a, b, c, d unsafe.Pointer) {}

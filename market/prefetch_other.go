//go:build !amd64 && !arm64

package market

import "unsafe"

// prefetch does nothing here: no prefetch instruction is wired up.
func prefetch(p unsafe.Pointer) {}

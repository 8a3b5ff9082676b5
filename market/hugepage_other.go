//go:build !linux

package market

// hugeSlice returns a zeroed slice of n Ts; only Linux is asked for huge
// pages (see hugepage_linux.go).
func hugeSlice[T any](n int) []T { return make([]T, n) }

// populate returns s: only Linux is asked to back it up front.
func populate[T any](s []T) []T { return s }

//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package store

import "errors"

// freeBytes is not known on this system: no write is refused for space.
func freeBytes(string) (uint64, error) { return 0, errors.New("store: free space unknown") }

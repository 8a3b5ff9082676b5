//go:build linux || darwin || freebsd || netbsd || openbsd

package store

import "syscall"

// freeBytes is the space free to unprivileged users on dir's filesystem.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

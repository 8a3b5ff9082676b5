package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestResellUsage: `ask --resell` misused exits 2 with the reason, before
// any daemon is needed.
func TestResellUsage(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo") // never created: usage errors come first
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"ask", "--resell", "bafyL"}, "--price DECIMAL is required"},
		{[]string{"ask", "--resell=bafyL", "--price", "cheap"}, "--price"},
		{[]string{"ask", "--resell", "", "--price", "2.5"}, "--resell LEASE is required"},
		{[]string{"ask", "--resell", "bafyL", "--price", "2.5", "--expires", "48h"}, "--expires"},
		{[]string{"ask", "--resell", "bafyL", "--price", "2.5", "--gpu", "x"}, "flag provided but not defined: -gpu"},
	} {
		_, stderr := wantExit(t, append([]string{"--repo", repo}, c.args...), 2)
		if !strings.Contains(stderr, c.wantErr) {
			t.Errorf("suanli %q: stderr %q, want %q", c.args, stderr, c.wantErr)
		}
	}
	if !wantsResell([]string{"--price", "1", "-resell=x"}) || wantsResell([]string{"--", "--resell"}) || wantsResell([]string{"--price", "1"}) {
		t.Error("wantsResell misreads its arguments")
	}
}

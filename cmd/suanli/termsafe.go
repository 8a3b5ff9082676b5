package main

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// termSafe writes what it is given with every character that could steer
// a terminal shown as a visible escape instead: C0 controls but newline and
// tab (and carriage return where allowed), DEL, C1 controls, the bidi
// overrides and isolates, and bytes that are not UTF-8. Remote peers write
// many strings the CLI prints (reject reasons, close notes, exit errors, GPU
// names, regions), so the CLI's stdout and stderr go through it.
//
// The escapes are JSON's (\u001b), so JSON output stays valid and decodes
// to the same strings (encoding/json already escapes C0 controls; DEL, C1
// and bidi characters only pass here inside strings). Bytes that are not
// UTF-8 are written \xNN (encoding/json never writes those).
type termSafe struct {
	mu      sync.Mutex // the daemon logs from many goroutines
	w       io.Writer
	allowCR bool
	pending []byte // an incomplete UTF-8 sequence at the end of the last Write
	buf     []byte
}

func newTermSafe(w io.Writer, allowCR bool) *termSafe { return &termSafe{w: w, allowCR: allowCR} }

// Write reports len(p) when the cleaned text was written whole.
func (t *termSafe) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := p
	if len(t.pending) > 0 {
		in = append(t.pending, p...)
		t.pending = nil
	}
	out := t.buf[:0]
	for len(in) > 0 {
		r, size := utf8.DecodeRune(in)
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRune(in) && len(in) < utf8.UTFMax {
				t.pending = append(t.pending[:0], in...)
				break
			}
			out = fmt.Appendf(out, `\x%02x`, in[0])
			in = in[1:]
			continue
		}
		if unsafeRune(r, t.allowCR) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, in[:size]...)
		}
		in = in[size:]
	}
	t.buf = out
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes an incomplete UTF-8 sequence left at the end as bytes.
func (t *termSafe) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return nil
	}
	var out []byte
	for _, b := range t.pending {
		out = fmt.Appendf(out, `\x%02x`, b)
	}
	t.pending = nil
	_, err := t.w.Write(out)
	return err
}

// unsafeRune reports whether r can steer a terminal or reorder text.
func unsafeRune(r rune, allowCR bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == '\r':
		return !allowCR
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidi embeddings, overrides, isolates and marks
	}
	return false
}

// cleanText is s as termSafe writes it, for strings built before printing.
func cleanText(s string) string {
	var b stringWriter
	t := newTermSafe(&b, false)
	t.Write([]byte(s))
	t.Flush()
	return string(b)
}

type stringWriter []byte

func (s *stringWriter) Write(p []byte) (int, error) { *s = append(*s, p...); return len(p), nil }

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTermSafe(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, 算力\n", "plain text, 算力\n"},
		{"a\tb\n", "a\tb\n"},
		{"\x1b[2J\x1b]0;pwned\x07", `\u001b[2J\u001b]0;pwned\u0007`},
		{"over\rwrite", `over\u000dwrite`},
		{"del\x7f", `del\u007f`},
		{"c1 \u009b31m", `c1 \u009b31m`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"isolate \u2066x\u2069", `isolate \u2066x\u2069`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
	}
	for _, tc := range tests {
		if got := cleanText(tc.in); got != tc.want {
			t.Errorf("cleanText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A rune split across writes passes whole.
	var b bytes.Buffer
	w := newTermSafe(&b, false)
	s := []byte("算")
	w.Write(s[:1])
	w.Write(s[1:])
	w.Flush()
	if b.String() != "算" {
		t.Errorf("a rune split across writes = %q, want 算", b.String())
	}
	// Logs keep carriage returns (progress bars) but nothing else.
	b.Reset()
	w = newTermSafe(&b, true)
	w.Write([]byte("50%\r100%\x1b[K\n"))
	if want := `50%` + "\r" + `100%\u001b[K` + "\n"; b.String() != want {
		t.Errorf("logs writer = %q, want %q", b.String(), want)
	}
}

// checkTermSafe is what FuzzTermSafe asserts for one input.
func checkTermSafe(t *testing.T, in string) {
	out := cleanText(in)
	if !utf8.ValidString(out) {
		t.Fatalf("cleanText(%q) = %q: not UTF-8", in, out)
	}
	for _, r := range out {
		if unsafeRune(r, false) {
			t.Fatalf("cleanText(%q) = %q: keeps %U", in, out, r)
		}
	}
	safe := utf8.ValidString(in) && !strings.ContainsFunc(in, func(r rune) bool { return unsafeRune(r, false) })
	if safe && out != in {
		t.Fatalf("cleanText(%q) = %q: changed safe text", in, out)
	}
	// JSON output stays valid and means the same.
	if utf8.ValidString(in) {
		j, _ := json.Marshal(in)
		var back string
		if err := json.Unmarshal([]byte(cleanText(string(j))), &back); err != nil || back != in {
			t.Fatalf("JSON of %q through termSafe decodes to %q, %v", in, back, err)
		}
	}
}

func FuzzTermSafe(f *testing.F) {
	for _, s := range []string{"", "ok\n", "\x1b[31mred", "\u202e", "\xc3", "\u0085", "a\rb", `\u001b`, "算力"} {
		f.Add(s)
	}
	f.Fuzz(checkTermSafe)
}

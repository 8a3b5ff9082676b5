package httpapi

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/repofile"
)

// Access to the local API.
//
// <repo>/api.token holds the node's full token: it is created when the
// daemon first starts and kept across restarts, so a dashboard URL stays
// valid. <repo>/api.readonly holds read-only tokens, one a line, issued by
// IssueReadOnlyToken (`suanli dashboard --read-only`): they may read every
// view but change nothing. Every request must name the API's own host (a
// DNS-rebinding page names its own) and, when a browser sends an Origin,
// come from the API's own origin (a foreign page's POST is refused).
const ReadOnlyFile = "api.readonly"

// tokenLen is the hex length of a token (32 random bytes).
const tokenLen = 64

// access is what a request's token grants.
type access int

const (
	accessNone access = iota
	accessRead
	accessFull
)

// newToken returns 32 random bytes in hex.
func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// validToken reports whether s looks like a token this package made.
func validToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// LoadOrCreateToken returns the repo's full API token, creating it (0600)
// when absent or unreadable as a token.
func LoadOrCreateToken(repo string) (string, error) {
	p := filepath.Join(repo, repofile.APIToken)
	if b, err := os.ReadFile(p); err == nil {
		if t := strings.TrimSpace(string(b)); validToken(t) {
			os.Chmod(p, 0o600)
			return t, nil
		}
	}
	t := newToken()
	if err := repofile.WriteAtomic(p, []byte(t+"\n"), 0o600); err != nil {
		return "", err
	}
	return t, nil
}

// IssueReadOnlyToken adds a read-only API token to a repo and returns it.
// A running daemon accepts it from its next request on.
func IssueReadOnlyToken(repo string) (string, error) {
	p := filepath.Join(repo, ReadOnlyFile)
	old, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	t := newToken()
	var buf bytes.Buffer
	buf.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		buf.WriteByte('\n')
	}
	buf.WriteString(t + "\n")
	return t, repofile.WriteAtomic(p, buf.Bytes(), 0o600)
}

// RevokeReadOnlyTokens removes every read-only token of a repo.
func RevokeReadOnlyTokens(repo string) error {
	err := os.Remove(filepath.Join(repo, ReadOnlyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// readOnlyTokens is the set in <repo>/api.readonly, re-read when the file
// changes.
type readOnlyTokens struct {
	path    string
	mu      sync.Mutex
	modTime time.Time
	size    int64
	tokens  map[string]bool
}

func (r *readOnlyTokens) has(tok string) bool {
	st, err := os.Stat(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.tokens, r.modTime, r.size = nil, time.Time{}, 0
		return false
	}
	if r.tokens == nil || !st.ModTime().Equal(r.modTime) || st.Size() != r.size {
		r.tokens = map[string]bool{}
		if b, err := os.ReadFile(r.path); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if l = strings.TrimSpace(l); validToken(l) {
					r.tokens[l] = true
				}
			}
		}
		r.modTime, r.size = st.ModTime(), st.Size()
	}
	// Constant time over the candidate: compare against each entry.
	found := false
	for t := range r.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
			found = true
		}
	}
	return found
}

// access checks a request's bearer token.
func (s *Server) access(r *http.Request) access {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		return accessNone
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1 {
		return accessFull
	}
	if s.readOnly != nil && s.readOnly.has(got) {
		return accessRead
	}
	return accessNone
}

// registerAccessRoute serves GET /api/v0/access, so a page can tell a
// read-only token from a full one and hide what it could not do.
func registerAccessRoute(mux *http.ServeMux, s *Server) {
	mux.HandleFunc("GET "+api.Prefix+"/access", s.auth(func(r *http.Request) (any, error) {
		if s.access(r) == accessFull {
			return api.AccessView{Access: "full"}, nil
		}
		return api.AccessView{Access: "read-only"}, nil
	}))
}

// allowedHosts are the Host values that name this API: its listen address,
// and localhost / 127.0.0.1 / [::1] on the same port; "unix" for a socket.
func allowedHosts(addr string) map[string]bool {
	if strings.HasPrefix(addr, "unix:") {
		return map[string]bool{"unix": true}
	}
	out := map[string]bool{addr: true}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		for _, h := range []string{"127.0.0.1", "localhost", "::1"} {
			out[net.JoinHostPort(h, port)] = true
		}
	}
	return out
}

// guard refuses, with 403, requests whose Host is not the API's own (DNS
// rebinding) or whose Origin is another site's (CSRF), before any handler.
func (s *Server) guard(h http.Handler) http.Handler {
	hosts := allowedHosts(s.addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts[strings.ToLower(r.Host)] {
			s.reject("foreign_host")
			writeError(w, api.Errorf(api.CodeForbidden, "host %q is not this API's address", r.Host))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || u.Scheme != "http" || !hosts[strings.ToLower(u.Host)] {
				s.reject("foreign_origin")
				writeError(w, api.Errorf(api.CodeForbidden, "origin %q is not this API's own", o))
				return
			}
		}
		if f := r.Header.Get("Sec-Fetch-Site"); f == "cross-site" {
			s.reject("foreign_origin")
			writeError(w, api.Errorf(api.CodeForbidden, "cross-site request refused"))
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// decodeBody decodes a JSON request body into v, refusing unknown fields,
// trailing data and wrong types with a message naming the field.
func decodeBody(r *http.Request, what string, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.BadRequest("%s: %s", what, describeJSONError(err))
	}
	if dec.More() {
		return api.BadRequest("%s: trailing data after the JSON object", what)
	}
	if _, err := dec.Token(); err != io.EOF {
		return api.BadRequest("%s: trailing data after the JSON object", what)
	}
	return nil
}

// describeJSONError names the field a decoding error is about.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &te):
		f := te.Field
		if f == "" {
			return fmt.Sprintf("want a JSON object, got %s", te.Value)
		}
		return fmt.Sprintf("field %q: want %s, got %s", f, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &mb):
		return fmt.Sprintf("body larger than %d bytes", mb.Limit)
	case errors.Is(err, io.EOF):
		return "empty body: want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	if m, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + m
	}
	return err.Error()
}

func jsonKind(k string) string {
	switch k {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return k
}

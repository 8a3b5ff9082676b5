package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/repofile"
)

// Package httpapi serves a node's api.API over local HTTP: every route
// of /api/v0 behind a bearer token (full or read-only), Host and Origin
// checks against DNS rebinding and cross-site requests, errors as
// api.WireError with their code's status, /metrics, and the dashboard.
// node/client is its other end.
//
// Every /api/v0 route needs "Authorization: Bearer <token>" with the token
// from <repo>/api.token; /metrics is open (the server listens on loopback
// or a unix socket only).

// Config is what Start serves.
type Config struct {
	// API answers every route; the node, in-process.
	API api.API
	// Repo is the node's repo: its api file is written there once the
	// server listens, and its tokens are kept there.
	Repo string
	// Addr is a loopback host:port ("127.0.0.1:0" picks a port) or
	// unix:/path.
	Addr string
	// Metrics serves GET /metrics; nil: none.
	Metrics http.Handler
	// OnReject counts a refused request by reason (foreign_host,
	// foreign_origin); nil: not counted.
	OnReject func(reason string)
}

// Server is a running local API.
type Server struct {
	api     api.API
	srv     *http.Server
	ln      net.Listener
	addr    string
	token   string
	apiPath string
	reject  func(reason string)
	// readOnly are the tokens that may only read (see access.go).
	readOnly *readOnlyTokens
}

// Start listens on cfg.Addr, serves, and writes <repo>/api.
func Start(cfg Config) (*Server, error) {
	addr, n := cfg.Addr, cfg.API
	network, where := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, where = "unix", p
		os.Remove(p)
	} else if host, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("node: api address %q: %w", addr, err)
	} else if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("node: api address %q: the local API binds loopback or a unix socket only", addr)
	}
	ln, err := net.Listen(network, where)
	if err != nil {
		return nil, fmt.Errorf("node: api listen: %w", err)
	}
	tok, err := LoadOrCreateToken(cfg.Repo)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{api: n, ln: ln, token: tok, apiPath: filepath.Join(cfg.Repo, repofile.API), reject: cfg.OnReject,
		readOnly: &readOnlyTokens{path: filepath.Join(cfg.Repo, ReadOnlyFile)}}
	if s.reject == nil {
		s.reject = func(string) {}
	}
	if network == "unix" {
		s.addr = "unix:" + where
		os.Chmod(where, 0o600)
	} else {
		s.addr = ln.Addr().String()
	}
	mux := http.NewServeMux()
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	mux.HandleFunc("GET "+api.Prefix+"/id", s.auth(func(r *http.Request) (any, error) { return n.ID(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/gpus", s.auth(func(r *http.Request) (any, error) { return n.GPUs(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/peers", s.auth(func(r *http.Request) (any, error) { return n.Peers(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/offers", s.auth(func(r *http.Request) (any, error) {
		q, err := offerQueryFromURL(r)
		if err != nil {
			return nil, err
		}
		return n.Offers(r.Context(), q)
	}))
	mux.HandleFunc("POST "+api.Prefix+"/orders", s.auth(func(r *http.Request) (any, error) {
		var req api.OrderRequest
		if err := decodeBody(r, "order request", 64<<10, &req); err != nil {
			return nil, err
		}
		return n.PlaceOrder(r.Context(), req)
	}))
	mux.HandleFunc("GET "+api.Prefix+"/orders", s.auth(func(r *http.Request) (any, error) { return n.Orders(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/orders/{id}", s.auth(func(r *http.Request) (any, error) {
		return n.Order(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("DELETE "+api.Prefix+"/orders/{id}", s.auth(func(r *http.Request) (any, error) {
		return n.CancelOrder(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("GET "+api.Prefix+"/book/{market}", s.auth(func(r *http.Request) (any, error) {
		return n.Book(r.Context(), r.PathValue("market"), r.URL.Query().Get("currency"))
	}))
	registerLeaseRoutes(mux, s, n)
	mux.HandleFunc("GET "+api.Prefix+"/trades/{market}", s.auth(func(r *http.Request) (any, error) {
		return n.Trades(r.Context(), r.PathValue("market"))
	}))
	registerAttestRoutes(mux, s)
	registerDashboardRoutes(mux, s, n)
	s.srv = &http.Server{Handler: s.guard(mux), ReadHeaderTimeout: 10 * time.Second}
	if err := repofile.WriteAtomic(s.apiPath, []byte(s.addr+"\n"), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is where the server listens: host:port or unix:/path.
func (s *Server) Addr() string { return s.addr }

// Close removes <repo>/api and stops serving.
func (s *Server) Close() error {
	os.Remove(s.apiPath)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		// A browser's preconnected sockets never go idle: drop them.
		return s.srv.Close()
	} else if err != nil {
		return err
	}
	return nil
}

func (s *Server) auth(h func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch s.access(r) {
		case accessNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="suanli"`)
			writeError(w, api.ErrUnauthorized)
			return
		case accessRead:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				writeError(w, api.Errorf(api.CodeForbidden, "a read-only token cannot change anything"))
				return
			}
			// Views answer read-only requests from what the node holds:
			// no peer contacted, no market joined, no DHT lookup.
			r = r.WithContext(api.WithReadOnly(r.Context()))
		}
		v, err := h(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// writeError serves err with its code's status; its message is the body's
// "error", its code the body's "code" (see api.WireError).
func writeError(w http.ResponseWriter, err error) {
	c := api.CodeOf(err)
	writeJSON(w, c.Status(), api.WireError{Error: err.Error(), Code: c})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func offerQueryFromURL(r *http.Request) (api.OfferQuery, error) {
	v := r.URL.Query()
	q := api.OfferQuery{
		GPU: v.Get("gpu"), Region: v.Get("region"), MaxPrice: v.Get("max_price"),
		Currency: v.Get("currency"), Sort: v.Get("sort"), CCAttested: v.Get("cc_attested") == "true",
		MinIsolation: v.Get("min_isolation"), From: v.Get("from"),
	}
	var err error
	if s := v.Get("min_vcpus_per_gpu"); s != "" {
		if q.MinVCPUsPerGPU, err = strconv.ParseUint(s, 10, 32); err != nil {
			return q, api.BadRequest("min_vcpus_per_gpu: %v", err)
		}
	}
	if s := v.Get("min_ram_gib_per_gpu"); s != "" {
		if q.MinRAMGiBPerGPU, err = strconv.ParseUint(s, 10, 32); err != nil {
			return q, api.BadRequest("min_ram_gib_per_gpu: %v", err)
		}
	}
	if s := v.Get("min_gpus"); s != "" {
		if q.MinGPUs, err = strconv.Atoi(s); err != nil {
			return q, api.BadRequest("min_gpus: %v", err)
		}
	}
	if s := v.Get("min_free_gpus"); s != "" {
		if q.MinFreeGPUs, err = strconv.Atoi(s); err != nil {
			return q, api.BadRequest("min_free_gpus: %v", err)
		}
	}
	if s := v.Get("min_vram_gib"); s != "" {
		if q.MinVRAMGiB, err = strconv.ParseUint(s, 10, 32); err != nil {
			return q, api.BadRequest("min_vram_gib: %v", err)
		}
	}
	return q, nil
}

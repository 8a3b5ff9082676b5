package node

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

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The local HTTP API. Every /api/v0 route needs "Authorization: Bearer
// <token>" with the token from <repo>/api.token; /metrics is open (it
// listens on loopback or a unix socket only).
const apiPrefix = "/api/v0"

// userError is a failure caused by the caller's input: HTTP 400, and its
// message is safe to show.
type userError struct{ msg string }

func (e *userError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &userError{msg: fmt.Sprintf(format, args...)}
}

// IsBadRequest reports whether err was caused by the caller's input.
func IsBadRequest(err error) bool {
	var u *userError
	return errors.As(err, &u)
}

type apiServer struct {
	n       *Node
	srv     *http.Server
	ln      net.Listener
	addr    string
	token   string
	apiPath string
	// readOnly are the tokens that may only read (see access.go).
	readOnly *readOnlyTokens
}

func startAPI(n *Node, addr string) (*apiServer, error) {
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
	tok, err := loadOrCreateToken(n.repo)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &apiServer{n: n, ln: ln, token: tok, apiPath: filepath.Join(n.repo, apiFile),
		readOnly: &readOnlyTokens{path: filepath.Join(n.repo, apiReadOnlyFile)}}
	if network == "unix" {
		s.addr = "unix:" + where
		os.Chmod(where, 0o600)
	} else {
		s.addr = ln.Addr().String()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+apiPrefix+"/id", s.auth(func(r *http.Request) (any, error) { return n.ID(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/gpus", s.auth(func(r *http.Request) (any, error) { return n.GPUs(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/peers", s.auth(func(r *http.Request) (any, error) { return n.Peers(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/offers", s.auth(func(r *http.Request) (any, error) {
		q, err := offerQueryFromURL(r)
		if err != nil {
			return nil, err
		}
		return n.Offers(r.Context(), q)
	}))
	mux.HandleFunc("POST "+apiPrefix+"/orders", s.auth(func(r *http.Request) (any, error) {
		var req OrderRequest
		if err := decodeBody(r, "order request", 64<<10, &req); err != nil {
			return nil, err
		}
		return n.PlaceOrder(r.Context(), req)
	}))
	mux.HandleFunc("GET "+apiPrefix+"/orders", s.auth(func(r *http.Request) (any, error) { return n.Orders(r.Context()) }))
	mux.HandleFunc("GET "+apiPrefix+"/orders/{id}", s.auth(func(r *http.Request) (any, error) {
		return n.Order(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("DELETE "+apiPrefix+"/orders/{id}", s.auth(func(r *http.Request) (any, error) {
		return n.CancelOrder(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc("GET "+apiPrefix+"/book/{market}", s.auth(func(r *http.Request) (any, error) {
		return n.Book(r.Context(), r.PathValue("market"), r.URL.Query().Get("currency"))
	}))
	registerLeaseRoutes(mux, s, n)
	mux.HandleFunc("GET "+apiPrefix+"/trades/{market}", s.auth(func(r *http.Request) (any, error) {
		return n.Trades(r.Context(), r.PathValue("market"))
	}))
	registerAttestRoutes(mux, s)
	registerDashboardRoutes(mux, s, n)
	s.srv = &http.Server{Handler: s.guard(mux), ReadHeaderTimeout: 10 * time.Second}
	if err := writeFileAtomic(s.apiPath, []byte(s.addr+"\n"), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *apiServer) close() error {
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

func (s *apiServer) auth(h func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch s.access(r) {
		case accessNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="suanli"`)
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "missing or wrong API token (see <repo>/api.token)"})
			return
		case accessRead:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				writeJSON(w, http.StatusForbidden, apiError{Error: "a read-only token cannot change anything"})
				return
			}
		}
		v, err := h(r)
		if err != nil {
			status := http.StatusInternalServerError
			switch {
			case IsBadRequest(err):
				status = http.StatusBadRequest
			case errors.Is(err, ErrNoGPUs):
				status = http.StatusNotFound
			case errors.Is(err, ErrUnknownOrder):
				status = http.StatusNotFound
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
				status = http.StatusGatewayTimeout
			}
			writeJSON(w, status, apiError{Error: err.Error(), BadRequest: status == http.StatusBadRequest,
				NoGPU: errors.Is(err, ErrNoGPUs), UnknownOrder: errors.Is(err, ErrUnknownOrder)})
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

type apiError struct {
	Error        string `json:"error"`
	BadRequest   bool   `json:"bad_request,omitempty"`
	NoGPU        bool   `json:"no_gpu,omitempty"`
	UnknownOrder bool   `json:"unknown_order,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func offerQueryFromURL(r *http.Request) (OfferQuery, error) {
	v := r.URL.Query()
	q := OfferQuery{
		GPU: v.Get("gpu"), Region: v.Get("region"), MaxPrice: v.Get("max_price"),
		Currency: v.Get("currency"), Sort: v.Get("sort"), CCAttested: v.Get("cc_attested") == "true",
	}
	var err error
	if s := v.Get("min_gpus"); s != "" {
		if q.MinGPUs, err = strconv.Atoi(s); err != nil {
			return q, badRequest("min_gpus: %v", err)
		}
	}
	if s := v.Get("min_free_gpus"); s != "" {
		if q.MinFreeGPUs, err = strconv.Atoi(s); err != nil {
			return q, badRequest("min_free_gpus: %v", err)
		}
	}
	if s := v.Get("min_vram_gib"); s != "" {
		if q.MinVRAMGiB, err = strconv.ParseUint(s, 10, 32); err != nil {
			return q, badRequest("min_vram_gib: %v", err)
		}
	}
	return q, nil
}

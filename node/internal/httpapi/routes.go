package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/dashboard"
)

// registerAttestRoutes adds GET /api/v0/attest/{peer}[?timeout=D].
func registerAttestRoutes(mux *http.ServeMux, s *Server) {
	mux.HandleFunc("GET "+api.Prefix+"/attest/{peer}", s.auth(func(r *http.Request) (any, error) {
		p := r.PathValue("peer")
		ctx := r.Context()
		if t := r.URL.Query().Get("timeout"); t != "" {
			d, err := time.ParseDuration(t)
			if err != nil || d <= 0 || d > 10*time.Minute {
				return nil, api.BadRequest("timeout %q: want a duration in (0, 10m]", t)
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return s.api.Attest(ctx, p)
	}))
}

// registerEvidenceRoutes serves the evidence part of LeaseAPI.
func registerEvidenceRoutes(mux *http.ServeMux, s *Server, n api.API) {
	mux.HandleFunc("GET "+api.Prefix+"/evidence", s.auth(func(r *http.Request) (any, error) { return n.Evidence(r.Context(), r.URL.Query().Get("peer")) }))
	mux.HandleFunc("GET "+api.Prefix+"/evidence/export", s.auth(func(r *http.Request) (any, error) {
		return n.ExportEvidence(r.Context(), r.URL.Query().Get("id"))
	}))
}

// registerDashboardRoutes serves DashboardAPI and the dashboard's pages.
func registerDashboardRoutes(mux *http.ServeMux, s *Server, n api.API) {
	mux.HandleFunc("GET "+api.Prefix+"/history/{market}", s.auth(func(r *http.Request) (any, error) {
		v := r.URL.Query()
		var q api.HistoryQuery
		if t := v.Get("since"); t != "" {
			ts, err := time.Parse(time.RFC3339Nano, t)
			if err != nil {
				return nil, api.BadRequest("since: want an RFC 3339 time: %v", err)
			}
			q.Since = ts
		}
		var err error
		if q.Limit, err = intParam(v, "limit"); err != nil {
			return nil, err
		}
		return n.History(r.Context(), r.PathValue("market"), v.Get("currency"), q)
	}))
	mux.HandleFunc("GET "+api.Prefix+"/markets", s.auth(func(r *http.Request) (any, error) { return n.Markets(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/gpus/history", s.auth(func(r *http.Request) (any, error) { return n.GPUHistory(r.Context()) }))
	mux.HandleFunc("GET "+api.Prefix+"/orders-page", s.auth(func(r *http.Request) (any, error) {
		v := r.URL.Query()
		q := api.PageQuery{Status: v.Get("status")}
		var err error
		if q.Offset, err = intParam(v, "offset"); err != nil {
			return nil, err
		}
		if q.Limit, err = intParam(v, "limit"); err != nil {
			return nil, err
		}
		return n.OrdersPage(r.Context(), q)
	}))
	registerStatusRoute(mux, s, n)
	registerAccessRoute(mux, s)
	mountDashboard(mux)
}

// registerLeaseRoutes serves LeaseAPI on the local API.
func registerLeaseRoutes(mux *http.ServeMux, s *Server, n api.API) {
	registerEvidenceRoutes(mux, s, n)
	p := "GET " + api.Prefix
	mux.HandleFunc(p+"/leases", s.auth(func(r *http.Request) (any, error) { return n.Leases(r.Context()) }))
	mux.HandleFunc(p+"/leases/{id}", s.auth(func(r *http.Request) (any, error) { return n.Lease(r.Context(), r.PathValue("id")) }))
	mux.HandleFunc("POST "+api.Prefix+"/leases/{id}/close", s.auth(func(r *http.Request) (any, error) {
		return n.CloseLease(r.Context(), r.PathValue("id"))
	}))
	mux.HandleFunc(p+"/leases/{id}/logs", s.auth(func(r *http.Request) (any, error) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		return n.Logs(r.Context(), r.PathValue("id"), after)
	}))
	mux.HandleFunc(p+"/leases/{id}/receipts", s.auth(func(r *http.Request) (any, error) { return n.Receipts(r.Context(), r.PathValue("id")) }))
	mux.HandleFunc(p+"/leases/{id}/verify", s.auth(func(r *http.Request) (any, error) { return n.VerifyReceipts(r.Context(), r.PathValue("id")) }))
	mux.HandleFunc(p+"/leases/{id}/export", s.auth(func(r *http.Request) (any, error) { return n.ExportReceipts(r.Context(), r.PathValue("id")) }))
	mux.HandleFunc(p+"/settle", s.auth(func(r *http.Request) (any, error) { return n.Settle(r.Context(), r.URL.Query().Get("peer")) }))
	mux.HandleFunc("POST "+api.Prefix+"/settle/ack", s.auth(func(r *http.Request) (any, error) {
		var req api.PaymentRequest
		if err := decodeBody(r, "payment", 1<<16, &req); err != nil {
			return nil, err
		}
		return n.AckPayment(r.Context(), req)
	}))
}

func registerStatusRoute(mux *http.ServeMux, s *Server, n api.API) {
	mux.HandleFunc("GET "+api.Prefix+"/status", s.auth(func(r *http.Request) (any, error) { return n.Status(r.Context()) }))
}

// mountDashboard serves the dashboard's files; / leads to it.
func mountDashboard(mux *http.ServeMux) {
	mux.Handle("GET "+dashboard.Prefix, dashboard.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, dashboard.Prefix, http.StatusFound)
	})
}

func intParam(v url.Values, name string) (int, error) {
	s := v.Get(name)
	if s == "" {
		return 0, nil
	}
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, api.BadRequest("%s: want an integer, got %q", name, s)
	}
	return i, nil
}

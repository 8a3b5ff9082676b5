package node

import (
	"net/http"
	"strconv"

	"github.com/suanli/suanli/node/api"
)

var (
	_ api.LeaseAPI = (*Node)(nil)
)

// registerLeaseRoutes serves LeaseAPI on the local API.
func registerLeaseRoutes(mux *http.ServeMux, s *apiServer, n *Node) {
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

package node

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// LeaseAPI is what a running node answers about its leases and their
// settlement; part of API.
type LeaseAPI interface {
	// Leases lists the leases this node is party to, newest first.
	Leases(ctx context.Context) ([]LeaseView, error)
	// Lease is one of them.
	Lease(ctx context.Context, id string) (LeaseView, error)
	// CloseLease ends a lease early, as buyer-closed or provider-closed.
	CloseLease(ctx context.Context, id string) (LeaseView, error)
	// Logs is a lease's captured command output after seq after (buyer).
	Logs(ctx context.Context, id string, after uint64) (LogsView, error)
	// Receipts is a lease's stored receipt chain, signatures checked.
	Receipts(ctx context.Context, id string) ([]ReceiptView, error)
	// VerifyReceipts re-verifies every signature and link of a chain.
	VerifyReceipts(ctx context.Context, id string) (ChainReport, error)
	// ExportReceipts is a chain with its signed terms, for VerifyExport.
	ExportReceipts(ctx context.Context, id string) ([]byte, error)
	// Settle is the settlement with a peer, or every peer when "".
	Settle(ctx context.Context, peer string) ([]SettlementView, error)
	// AckPayment records (provider) that a buyer paid, and tells it.
	AckPayment(ctx context.Context, req PaymentRequest) (PaymentView, error)
	// Evidence is the signed misbehaviour this node keeps (equivocating
	// receipts, refused fills), of peer only when peer is not "".
	Evidence(ctx context.Context, peer string) ([]EvidenceView, error)
	// ExportEvidence is one piece of it, for VerifyEvidence.
	ExportEvidence(ctx context.Context, id string) ([]byte, error)
}

var (
	_ LeaseAPI = (*Node)(nil)
	_ LeaseAPI = (*Client)(nil)
)

// registerLeaseRoutes serves LeaseAPI on the local API.
func registerLeaseRoutes(mux *http.ServeMux, s *apiServer, n *Node) {
	registerEvidenceRoutes(mux, s, n)
	p := "GET " + apiPrefix
	mux.HandleFunc(p+"/leases", s.auth(func(r *http.Request) (any, error) { return n.Leases(r.Context()) }))
	mux.HandleFunc(p+"/leases/{id}", s.auth(func(r *http.Request) (any, error) { return n.Lease(r.Context(), r.PathValue("id")) }))
	mux.HandleFunc("POST "+apiPrefix+"/leases/{id}/close", s.auth(func(r *http.Request) (any, error) {
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
	mux.HandleFunc("POST "+apiPrefix+"/settle/ack", s.auth(func(r *http.Request) (any, error) {
		var req PaymentRequest
		if err := decodeBody(r, "payment", 1<<16, &req); err != nil {
			return nil, err
		}
		return n.AckPayment(r.Context(), req)
	}))
}

// Leases implements LeaseAPI.
func (c *Client) Leases(ctx context.Context) (v []LeaseView, err error) {
	return v, c.get(ctx, "/leases", nil, &v)
}

// Lease implements LeaseAPI.
func (c *Client) Lease(ctx context.Context, id string) (v LeaseView, err error) {
	return v, c.get(ctx, "/leases/"+url.PathEscape(id), nil, &v)
}

// CloseLease implements LeaseAPI.
func (c *Client) CloseLease(ctx context.Context, id string) (v LeaseView, err error) {
	return v, c.do(ctx, http.MethodPost, "/leases/"+url.PathEscape(id)+"/close", nil, []byte("{}"), &v)
}

// Logs implements LeaseAPI.
func (c *Client) Logs(ctx context.Context, id string, after uint64) (v LogsView, err error) {
	return v, c.get(ctx, "/leases/"+url.PathEscape(id)+"/logs", url.Values{"after": {strconv.FormatUint(after, 10)}}, &v)
}

// Receipts implements LeaseAPI.
func (c *Client) Receipts(ctx context.Context, id string) (v []ReceiptView, err error) {
	return v, c.get(ctx, "/leases/"+url.PathEscape(id)+"/receipts", nil, &v)
}

// VerifyReceipts implements LeaseAPI.
func (c *Client) VerifyReceipts(ctx context.Context, id string) (v ChainReport, err error) {
	return v, c.get(ctx, "/leases/"+url.PathEscape(id)+"/verify", nil, &v)
}

// ExportReceipts implements LeaseAPI.
func (c *Client) ExportReceipts(ctx context.Context, id string) (v []byte, err error) {
	return v, c.get(ctx, "/leases/"+url.PathEscape(id)+"/export", nil, &v)
}

// Settle implements LeaseAPI.
func (c *Client) Settle(ctx context.Context, peer string) (v []SettlementView, err error) {
	var q url.Values
	if peer != "" {
		q = url.Values{"peer": {peer}}
	}
	return v, c.get(ctx, "/settle", q, &v)
}

// AckPayment implements LeaseAPI.
func (c *Client) AckPayment(ctx context.Context, req PaymentRequest) (v PaymentView, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return v, err
	}
	return v, c.do(ctx, http.MethodPost, "/settle/ack", nil, body, &v)
}

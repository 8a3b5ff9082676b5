// Package client talks to a running daemon over its local HTTP API. A
// Client implements api.API, so code written against the interface runs
// the same in-process (node.Node) or against a daemon; failures come back
// as *api.Error values that match the same sentinels (errors.Is) the
// in-process node returns.
//
// The package imports neither libp2p, Badger nor NVML: a tool that only
// talks to a daemon stays small and builds without cgo.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/repofile"
)

// Client talks to a running daemon's local API. It implements api.API.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

var _ api.API = (*Client)(nil)

// Endpoint is a running daemon's API address and token, read from its repo.
type Endpoint struct {
	Addr  string // host:port, or unix:/path
	Token string
}

// ErrNoDaemon is returned by Open when no daemon runs on the repo.
var ErrNoDaemon = errors.New("node: no daemon running")

// ReadEndpoint reads <repo>/api and <repo>/api.token, refusing a stale api
// file that a daemon killed with -9 left behind.
func ReadEndpoint(dir string) (Endpoint, error) {
	b, err := os.ReadFile(filepath.Join(dir, repofile.API))
	if errors.Is(err, os.ErrNotExist) {
		return Endpoint{}, fmt.Errorf("%w on repo %s: start one with `suanli daemon`", ErrNoDaemon, dir)
	}
	if err != nil {
		return Endpoint{}, err
	}
	// The dead daemon no longer holds the repo lock: the lock tells a live
	// daemon from a dead one.
	if f, err := repofile.Lock(dir); err == nil {
		f.Close()
		return Endpoint{}, fmt.Errorf("%w on repo %s (stale api file from a daemon that exited): start one with `suanli daemon`", ErrNoDaemon, dir)
	}
	tok, err := os.ReadFile(filepath.Join(dir, repofile.APIToken))
	if err != nil {
		return Endpoint{}, fmt.Errorf("node: read api token: %w", err)
	}
	return Endpoint{Addr: strings.TrimSpace(string(b)), Token: strings.TrimSpace(string(tok))}, nil
}

// New returns a client for an endpoint (see ReadEndpoint).
func New(ep Endpoint) *Client {
	c := &Client{base: "http://" + ep.Addr, token: ep.Token, hc: &http.Client{}}
	if p, ok := strings.CutPrefix(ep.Addr, "unix:"); ok {
		c.base = "http://unix"
		c.hc.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p)
		}}
	}
	return c
}

// Open reads <repo>/api and returns a client for the daemon there.
func Open(repo string) (*Client, error) {
	ep, err := ReadEndpoint(repo)
	if err != nil {
		return nil, err
	}
	return New(ep), nil
}

// Attest implements API. The daemon's challenge ends a little before ctx's
// deadline, so that its answer still arrives.
func (c *Client) Attest(ctx context.Context, provider string) (v api.AttestReport, err error) {
	q := url.Values{}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		left -= min(left/10, time.Second)
		if left <= 0 {
			return v, context.DeadlineExceeded
		}
		q.Set("timeout", left.Round(time.Millisecond).String())
	}
	err = c.get(ctx, "/attest/"+url.PathEscape(provider), q, &v)
	return v, err
}

// ID implements API.
func (c *Client) ID(ctx context.Context) (v api.IDInfo, err error) {
	err = c.get(ctx, "/id", nil, &v)
	return v, err
}

// GPUs implements API.
func (c *Client) GPUs(ctx context.Context) (v api.GPUReport, err error) {
	err = c.get(ctx, "/gpus", nil, &v)
	return v, err
}

// Peers implements API.
func (c *Client) Peers(ctx context.Context) (v []api.PeerView, err error) {
	err = c.get(ctx, "/peers", nil, &v)
	return v, err
}

// Offers implements API.
func (c *Client) Offers(ctx context.Context, q api.OfferQuery) (v []api.OfferView, err error) {
	p := url.Values{}
	set := func(k, val string) {
		if val != "" {
			p.Set(k, val)
		}
	}
	set("gpu", q.GPU)
	set("region", q.Region)
	set("max_price", q.MaxPrice)
	set("currency", q.Currency)
	set("sort", q.Sort)
	if q.MinGPUs != 0 {
		p.Set("min_gpus", strconv.Itoa(q.MinGPUs))
	}
	if q.MinFreeGPUs != 0 {
		p.Set("min_free_gpus", strconv.Itoa(q.MinFreeGPUs))
	}
	if q.MinVRAMGiB != 0 {
		p.Set("min_vram_gib", strconv.FormatUint(q.MinVRAMGiB, 10))
	}
	if q.CCAttested {
		p.Set("cc_attested", "true")
	}
	set("min_isolation", q.MinIsolation)
	set("from", q.From)
	if q.MinVCPUsPerGPU != 0 {
		p.Set("min_vcpus_per_gpu", strconv.FormatUint(q.MinVCPUsPerGPU, 10))
	}
	if q.MinRAMGiBPerGPU != 0 {
		p.Set("min_ram_gib_per_gpu", strconv.FormatUint(q.MinRAMGiBPerGPU, 10))
	}
	err = c.get(ctx, "/offers", p, &v)
	return v, err
}

// PlaceOrder implements API.
func (c *Client) PlaceOrder(ctx context.Context, r api.OrderRequest) (v api.OrderView, err error) {
	body, err := json.Marshal(r)
	if err != nil {
		return v, err
	}
	err = c.do(ctx, http.MethodPost, "/orders", nil, body, &v)
	return v, err
}

// Order implements API.
func (c *Client) Order(ctx context.Context, id string) (v api.OrderView, err error) {
	err = c.get(ctx, "/orders/"+url.PathEscape(id), nil, &v)
	return v, err
}

// Orders implements API.
func (c *Client) Orders(ctx context.Context) (v []api.OrderView, err error) {
	err = c.get(ctx, "/orders", nil, &v)
	return v, err
}

// CancelOrder implements API.
func (c *Client) CancelOrder(ctx context.Context, id string) (v api.OrderView, err error) {
	err = c.do(ctx, http.MethodDelete, "/orders/"+url.PathEscape(id), nil, nil, &v)
	return v, err
}

// Book implements API.
func (c *Client) Book(ctx context.Context, mkt, currency string) (v api.BookView, err error) {
	q := url.Values{}
	if currency != "" {
		q.Set("currency", currency)
	}
	err = c.get(ctx, "/book/"+url.PathEscape(mkt), q, &v)
	return v, err
}

// Trades implements API.
func (c *Client) Trades(ctx context.Context, mkt string) (v []api.TradeView, err error) {
	err = c.get(ctx, "/trades/"+url.PathEscape(mkt), nil, &v)
	return v, err
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, out)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	u := c.base + api.Prefix + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("node: daemon API: %w (is the daemon still running?)", err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e api.WireError
		if json.Unmarshal(respBody, &e) != nil || e.Error == "" {
			return fmt.Errorf("node: daemon API %s: %s", path, resp.Status)
		}
		return api.FromWire(e)
	}
	return json.Unmarshal(respBody, out)
}

// Evidence implements LeaseAPI.
func (c *Client) Evidence(ctx context.Context, who string) ([]api.EvidenceView, error) {
	var v []api.EvidenceView
	var q url.Values
	if who != "" {
		q = url.Values{"peer": {who}}
	}
	err := c.get(ctx, "/evidence", q, &v)
	return v, err
}

// ExportEvidence implements LeaseAPI.
func (c *Client) ExportEvidence(ctx context.Context, id string) ([]byte, error) {
	var v []byte
	err := c.get(ctx, "/evidence/export", url.Values{"id": {id}}, &v)
	return v, err
}

// History implements DashboardAPI.
func (c *Client) History(ctx context.Context, mkt, currency string, q api.HistoryQuery) (v api.HistoryView, err error) {
	p := url.Values{}
	if currency != "" {
		p.Set("currency", currency)
	}
	if !q.Since.IsZero() {
		p.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.Limit != 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	err = c.get(ctx, "/history/"+url.PathEscape(mkt), p, &v)
	return v, err
}

// GPUHistory implements DashboardAPI.
func (c *Client) GPUHistory(ctx context.Context) (v api.GPUHistoryView, err error) {
	err = c.get(ctx, "/gpus/history", nil, &v)
	return v, err
}

// Markets implements DashboardAPI.
func (c *Client) Markets(ctx context.Context) (v []api.MarketSummary, err error) {
	err = c.get(ctx, "/markets", nil, &v)
	return v, err
}

// OrdersPage implements DashboardAPI.
func (c *Client) OrdersPage(ctx context.Context, q api.PageQuery) (v api.OrdersPageView, err error) {
	p := url.Values{}
	if q.Offset != 0 {
		p.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Limit != 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Status != "" {
		p.Set("status", q.Status)
	}
	err = c.get(ctx, "/orders-page", p, &v)
	return v, err
}

// Leases implements LeaseAPI.
func (c *Client) Leases(ctx context.Context) (v []api.LeaseView, err error) {
	err = c.get(ctx, "/leases", nil, &v)
	return v, err
}

// Lease implements LeaseAPI.
func (c *Client) Lease(ctx context.Context, id string) (v api.LeaseView, err error) {
	err = c.get(ctx, "/leases/"+url.PathEscape(id), nil, &v)
	return v, err
}

// CloseLease implements LeaseAPI.
func (c *Client) CloseLease(ctx context.Context, id string) (v api.LeaseView, err error) {
	err = c.do(ctx, http.MethodPost, "/leases/"+url.PathEscape(id)+"/close", nil, []byte("{}"), &v)
	return v, err
}

// Logs implements LeaseAPI.
func (c *Client) Logs(ctx context.Context, id string, after uint64) (v api.LogsView, err error) {
	err = c.get(ctx, "/leases/"+url.PathEscape(id)+"/logs", url.Values{"after": {strconv.FormatUint(after, 10)}}, &v)
	return v, err
}

// Receipts implements LeaseAPI.
func (c *Client) Receipts(ctx context.Context, id string) (v []api.ReceiptView, err error) {
	err = c.get(ctx, "/leases/"+url.PathEscape(id)+"/receipts", nil, &v)
	return v, err
}

// VerifyReceipts implements LeaseAPI.
func (c *Client) VerifyReceipts(ctx context.Context, id string) (v api.ChainReport, err error) {
	err = c.get(ctx, "/leases/"+url.PathEscape(id)+"/verify", nil, &v)
	return v, err
}

// ExportReceipts implements LeaseAPI.
func (c *Client) ExportReceipts(ctx context.Context, id string) (v []byte, err error) {
	err = c.get(ctx, "/leases/"+url.PathEscape(id)+"/export", nil, &v)
	return v, err
}

// Settle implements LeaseAPI.
func (c *Client) Settle(ctx context.Context, peer string) (v []api.SettlementView, err error) {
	var q url.Values
	if peer != "" {
		q = url.Values{"peer": {peer}}
	}
	err = c.get(ctx, "/settle", q, &v)
	return v, err
}

// AckPayment implements LeaseAPI.
func (c *Client) AckPayment(ctx context.Context, req api.PaymentRequest) (v api.PaymentView, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return v, err
	}
	err = c.do(ctx, http.MethodPost, "/settle/ack", nil, body, &v)
	return v, err
}

// Status implements DashboardAPI.
func (c *Client) Status(ctx context.Context) (v api.StatusView, err error) {
	err = c.get(ctx, "/status", nil, &v)
	return v, err
}

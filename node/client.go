package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Client talks to a running daemon's local API. It implements API.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

var _ API = (*Client)(nil)

// NewClient returns a client for an endpoint read with ReadAPIEndpoint.
func NewClient(ep APIEndpoint) *Client {
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

// OpenClient reads <repo>/api and returns a client for the daemon there.
func OpenClient(repo string) (*Client, error) {
	ep, err := ReadAPIEndpoint(repo)
	if err != nil {
		return nil, err
	}
	return NewClient(ep), nil
}

// ID implements API.
func (c *Client) ID(ctx context.Context) (v IDInfo, err error) {
	return v, c.get(ctx, "/id", nil, &v)
}

// GPUs implements API.
func (c *Client) GPUs(ctx context.Context) (v GPUReport, err error) {
	return v, c.get(ctx, "/gpus", nil, &v)
}

// Peers implements API.
func (c *Client) Peers(ctx context.Context) (v []PeerView, err error) {
	return v, c.get(ctx, "/peers", nil, &v)
}

// Offers implements API.
func (c *Client) Offers(ctx context.Context, q OfferQuery) (v []OfferView, err error) {
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
	return v, c.get(ctx, "/offers", p, &v)
}

// PlaceOrder implements API.
func (c *Client) PlaceOrder(ctx context.Context, r OrderRequest) (v OrderView, err error) {
	body, err := json.Marshal(r)
	if err != nil {
		return v, err
	}
	return v, c.do(ctx, http.MethodPost, "/orders", nil, body, &v)
}

// Order implements API.
func (c *Client) Order(ctx context.Context, id string) (v OrderView, err error) {
	return v, c.get(ctx, "/orders/"+url.PathEscape(id), nil, &v)
}

// Orders implements API.
func (c *Client) Orders(ctx context.Context) (v []OrderView, err error) {
	return v, c.get(ctx, "/orders", nil, &v)
}

// CancelOrder implements API.
func (c *Client) CancelOrder(ctx context.Context, id string) (v OrderView, err error) {
	return v, c.do(ctx, http.MethodDelete, "/orders/"+url.PathEscape(id), nil, nil, &v)
}

// Book implements API.
func (c *Client) Book(ctx context.Context, mkt, currency string) (v BookView, err error) {
	q := url.Values{}
	if currency != "" {
		q.Set("currency", currency)
	}
	return v, c.get(ctx, "/book/"+url.PathEscape(mkt), q, &v)
}

// Trades implements API.
func (c *Client) Trades(ctx context.Context, mkt string) (v []TradeView, err error) {
	return v, c.get(ctx, "/trades/"+url.PathEscape(mkt), nil, &v)
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, out)
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	u := c.base + apiPrefix + path
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
		var e apiError
		if json.Unmarshal(respBody, &e) != nil || e.Error == "" {
			return fmt.Errorf("node: daemon API %s: %s", path, resp.Status)
		}
		switch {
		case e.BadRequest:
			return &userError{msg: e.Error}
		case e.UnknownOrder:
			return fmt.Errorf("%w: %s", ErrUnknownOrder, strings.TrimPrefix(e.Error, ErrUnknownOrder.Error()+": "))
		case e.NoGPU:
			return fmt.Errorf("%w: %s", ErrNoGPUs, strings.TrimPrefix(e.Error, ErrNoGPUs.Error()+": "))
		}
		return fmt.Errorf("node: daemon: %s", e.Error)
	}
	return json.Unmarshal(respBody, out)
}

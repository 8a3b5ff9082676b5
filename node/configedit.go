package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// ConfigKeys are the keys of config.json that `suanli config set` takes,
// in the order `config show` lists them.
var ConfigKeys = []string{"listen", "bootstrap", "api", "region", "price", "currency", "gpu_sim"}

// listKeys take several values; the others exactly one.
var listKeys = map[string]bool{"listen": true, "bootstrap": true}

// Validate checks every field of a config, naming the first bad one.
func (c Config) Validate() error {
	var errs []error
	if len(c.Listen) == 0 {
		errs = append(errs, errors.New("listen: want at least one multiaddr"))
	}
	for _, a := range c.Listen {
		if _, err := ma.NewMultiaddr(a); err != nil {
			errs = append(errs, fmt.Errorf("listen %q: %v", a, err))
		}
	}
	if _, err := parseBootstrap(c.Bootstrap); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap: %v", strings.TrimPrefix(err.Error(), "node: ")))
	}
	if err := validAPIAddr(c.API); err != nil {
		errs = append(errs, err)
	}
	if !market.ValidRegion(c.Region) {
		errs = append(errs, fmt.Errorf("region %q: want a code like CN-GZ or US-CA", c.Region))
	}
	if _, err := market.LookupCurrency(c.Currency); err != nil {
		errs = append(errs, fmt.Errorf("currency: %v", err))
	} else if _, err := market.ParseMoney(c.Price, c.Currency); err != nil {
		errs = append(errs, fmt.Errorf("price %q: %v", c.Price, err))
	}
	if c.GPUSim != "" && !slices.Contains(gpu.SimModels(), c.GPUSim) {
		errs = append(errs, fmt.Errorf("gpu_sim %q: want one of %s", c.GPUSim, strings.Join(gpu.SimModels(), ", ")))
	}
	if len(errs) > 0 {
		return api.BadRequest("config: %v", errors.Join(errs...))
	}
	return nil
}

// validAPIAddr accepts what startAPI binds: a loopback host:port or a
// unix socket path; "" turns the API off.
func validAPIAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if p == "" {
			return errors.New("api: unix: needs a socket path")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("api %q: want host:port or unix:/path: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("api %q: the local api.API binds loopback or a unix socket only", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("api %q: port: %v", addr, err)
	}
	return nil
}

// Set changes one key of a config to values (several for listen and
// bootstrap; none clears bootstrap or gpu_sim) and validates the result.
// The config is unchanged when it returns an error.
func (c *Config) Set(key string, values []string) error {
	next := *c
	if !slices.Contains(ConfigKeys, key) {
		return api.BadRequest("config: unknown key %q (have %s)", key, strings.Join(ConfigKeys, ", "))
	}
	if !listKeys[key] && len(values) > 1 {
		return api.BadRequest("config: %s takes one value, got %d", key, len(values))
	}
	one := ""
	if len(values) == 1 {
		one = values[0]
	}
	if !listKeys[key] && len(values) == 0 && key != "gpu_sim" && key != "api" {
		return api.BadRequest("config: %s needs a value", key)
	}
	switch key {
	case "listen":
		next.Listen = slices.Clone(values)
	case "bootstrap":
		next.Bootstrap = slices.Clone(values)
	case "api":
		next.API = one
	case "region":
		next.Region = one
	case "price":
		next.Price = one
	case "currency":
		next.Currency = one
	case "gpu_sim":
		next.GPUSim = one
	}
	if err := next.Validate(); err != nil {
		return err
	}
	*c = next
	return nil
}

// Get is one key's values as `config show` prints them.
func (c Config) Get(key string) ([]string, error) {
	switch key {
	case "listen":
		return c.Listen, nil
	case "bootstrap":
		return c.Bootstrap, nil
	case "api":
		return []string{c.API}, nil
	case "region":
		return []string{c.Region}, nil
	case "price":
		return []string{c.Price}, nil
	case "currency":
		return []string{c.Currency}, nil
	case "gpu_sim":
		return []string{c.GPUSim}, nil
	}
	return nil, api.BadRequest("config: unknown key %q (have %s)", key, strings.Join(ConfigKeys, ", "))
}

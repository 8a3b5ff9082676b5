// Package repo owns a node's repo directory: its layout, config.json
// (the Config, its defaults, validation and the edits `suanli config`
// makes), the version file and the identity key's place. The files the
// daemon shares with its clients and the repo's lock are
// node/internal/repofile's, which node/client imports without the GPU and
// libp2p packages that validating a config needs; package node re-exports
// this package's names (InitRepo, LoadConfig, Config, ...).
package repo

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/suanli/suanli/gpu"
	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/repofile"
	"github.com/suanli/suanli/node/keystore"
)

// Repo layout. A repo is one directory:
//
//	config.json   node configuration (0600)
//	keystore/     identity.key: the Ed25519 identity (0600, optionally encrypted)
//	datastore/    Badger: offers cache, published seq
//	repo.lock     held (flock) by the running daemon
//	version       repo format version
//	api           the running daemon's API address (written atomically, removed on exit)
//	api.token     bearer token for the local API (0600)
const (
	Version       = "1"
	configFile    = "config.json"
	keyFile       = "keystore/identity.key"
	DatastoreDir  = "datastore"
	versionFile   = "version"
	DefaultRegion = "CN-GZ"
)

// ErrNotInitialized is returned when a repo directory has no config: run `suanli init`.
var ErrNotInitialized = errors.New("node: repo not initialized")

// Config is what config.json holds. Options given to New override it.
type Config struct {
	// Listen are the multiaddrs the host listens on.
	Listen []string `json:"listen"`
	// Bootstrap are full multiaddrs (ending in /p2p/<id>) of peers to join.
	Bootstrap []string `json:"bootstrap"`
	// API is the host:port (or unix:/path) the local API binds.
	API string `json:"api"`
	// Region is the provider's region code, e.g. CN-GZ.
	Region string `json:"region"`
	// Price is the on-demand price per GPU-hour as a decimal, e.g. "2.50".
	Price string `json:"price"`
	// Currency of Price, e.g. USD.
	Currency string `json:"currency"`
	// GPUSim names a simulated machine (dgxh100, ...) instead of real NVML.
	GPUSim string `json:"gpu_sim,omitempty"`
	// CreditLimit is the most a buyer may owe this provider unpaid, a
	// decimal in Currency, or "none"; empty: 10 (see credit.go).
	CreditLimit string `json:"credit_limit,omitempty"`
	// CreditNew is the credit a buyer with no paid history starts with, a
	// decimal in Currency; empty: 1 (see credit.go). It grows with the
	// buyer's acknowledged payments up to CreditLimit.
	CreditNew string `json:"credit_new,omitempty"`
}

// DefaultConfig is what `suanli init` writes.
func DefaultConfig() Config {
	return Config{
		// Loopback and OS-chosen ports: safe by default, and several repos
		// can run side by side. Listen on a public address with --listen.
		Listen:   []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"},
		API:      "127.0.0.1:0",
		Region:   DefaultRegion,
		Price:    "2.50",
		Currency: "USD",
	}
}

// Init creates a repo at dir: key (encrypted when passphrase is not
// empty), config and version. It refuses a directory that already holds one.
func Init(dir string, cfg Config, passphrase []byte) (crypto.PrivKey, error) {
	if _, err := os.Stat(filepath.Join(dir, configFile)); err == nil {
		return nil, fmt.Errorf("node: repo %s already initialized", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "keystore"), 0o700); err != nil {
		return nil, fmt.Errorf("node: create repo: %w", err)
	}
	key, err := keystore.Create(filepath.Join(dir, keyFile), passphrase)
	if err != nil {
		return nil, err
	}
	if err := repofile.WriteAtomic(filepath.Join(dir, versionFile), []byte(Version+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := Save(dir, cfg); err != nil {
		return nil, err
	}
	return key, nil
}

// Or is a when it is not empty, else b: an option's list over the config's.
func Or(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}

// IsInitialized reports whether dir holds a repo.
func IsInitialized(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, configFile))
	return err == nil
}

// Load reads config.json from a repo.
func Load(dir string) (Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, fmt.Errorf("%w at %s: run `suanli init`", ErrNotInitialized, dir)
	}
	if err != nil {
		return Config{}, fmt.Errorf("node: read config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("node: config %s: %w", filepath.Join(dir, configFile), err)
	}
	return c, nil
}

// Save writes config.json (0600) atomically.
func Save(dir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return repofile.WriteAtomic(filepath.Join(dir, configFile), append(b, '\n'), 0o600)
}

// LoadKey reads the repo's identity key.
func LoadKey(dir string, passphrase []byte) (crypto.PrivKey, error) {
	return keystore.Load(filepath.Join(dir, keyFile), passphrase)
}

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
	if _, err := ParseBootstrap(c.Bootstrap); err != nil {
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

// ParseBootstrap parses full multiaddrs of bootstrap peers (ending in
// /p2p/<peer-id>).
func ParseBootstrap(addrs []string) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("node: bootstrap address %q: %w", a, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			return nil, fmt.Errorf("node: bootstrap address %q must end in /p2p/<peer-id>: %w", a, err)
		}
		out = append(out, *ai)
	}
	return out, nil
}

// Open prepares the repo at dir for a daemon: it creates and initializes
// it first with autoInit (default config, key encrypted with passphrase
// when not empty), else refuses a directory that holds none
// (ErrNotInitialized). It takes the repo's lock before initializing, so
// two daemons starting at once on a fresh repo do not both initialize it,
// and returns the lock, held, with the config.
func Open(dir string, autoInit bool, passphrase []byte) (*os.File, Config, error) {
	if autoInit {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, Config{}, fmt.Errorf("node: create repo: %w", err)
		}
	} else if !IsInitialized(dir) {
		return nil, Config{}, fmt.Errorf("%w at %s: run `suanli init`", ErrNotInitialized, dir)
	}
	lock, err := repofile.Lock(dir)
	if err != nil {
		return nil, Config{}, err
	}
	if autoInit && !IsInitialized(dir) {
		if _, err := Init(dir, DefaultConfig(), passphrase); err != nil {
			lock.Close()
			return nil, Config{}, err
		}
	}
	cfg, err := Load(dir)
	if err != nil {
		lock.Close()
		return nil, Config{}, err
	}
	return lock, cfg, nil
}

package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"

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
	RepoVersion   = "1"
	configFile    = "config.json"
	keyFile       = "keystore/identity.key"
	datastoreDir  = "datastore"
	lockFile      = repofile.LockFile
	versionFile   = "version"
	apiFile       = repofile.API
	apiTokenFile  = repofile.APIToken
	defaultRegion = "CN-GZ"
)

// ErrNotInitialized is returned when a repo directory has no config: run `suanli init`.
var ErrNotInitialized = errors.New("node: repo not initialized")

// ErrRepoLocked is returned when another process holds the repo.
var ErrRepoLocked = repofile.ErrLocked

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
		Region:   defaultRegion,
		Price:    "2.50",
		Currency: "USD",
	}
}

// InitRepo creates a repo at dir: key (encrypted when passphrase is not
// empty), config and version. It refuses a directory that already holds one.
func InitRepo(dir string, cfg Config, passphrase []byte) (crypto.PrivKey, error) {
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
	if err := writeFileAtomic(filepath.Join(dir, versionFile), []byte(RepoVersion+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := SaveConfig(dir, cfg); err != nil {
		return nil, err
	}
	return key, nil
}

// IsInitialized reports whether dir holds a repo.
func IsInitialized(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, configFile))
	return err == nil
}

// LoadConfig reads config.json from a repo.
func LoadConfig(dir string) (Config, error) {
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

// SaveConfig writes config.json (0600) atomically.
func SaveConfig(dir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, configFile), append(b, '\n'), 0o600)
}

// LoadKey reads the repo's identity key.
func LoadKey(dir string, passphrase []byte) (crypto.PrivKey, error) {
	return keystore.Load(filepath.Join(dir, keyFile), passphrase)
}

// lockRepo takes the repo's lock (see repofile.Lock).
func lockRepo(dir string) (*os.File, error) { return repofile.Lock(dir) }

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return repofile.WriteAtomic(path, data, perm)
}

package node

import (
	"context"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node/internal/repo"
	"github.com/suanli/suanli/node/internal/repofile"
)

// The repo directory (its layout, config.json and key) is package
// node/internal/repo's; these are its public names.

// RepoVersion is the repo format version a new repo is written with.
const RepoVersion = repo.Version

// ErrNotInitialized is returned when a repo directory has no config: run `suanli init`.
var ErrNotInitialized = repo.ErrNotInitialized

// ErrRepoLocked is returned when another process holds the repo.
var ErrRepoLocked = repofile.ErrLocked

// Config is what config.json holds. Options given to New override it.
// Validate checks it, Set and Get edit it as `suanli config` does.
type Config = repo.Config

// ConfigKeys are the keys of config.json that `suanli config set` takes,
// in the order `config show` lists them.
var ConfigKeys = repo.ConfigKeys

// DefaultConfig is what `suanli init` writes.
func DefaultConfig() Config { return repo.DefaultConfig() }

// InitRepo creates a repo at dir: key (encrypted when passphrase is not
// empty), config and version. It refuses a directory that already holds one.
func InitRepo(dir string, cfg Config, passphrase []byte) (crypto.PrivKey, error) {
	return repo.Init(dir, cfg, passphrase)
}

// IsInitialized reports whether dir holds a repo.
func IsInitialized(dir string) bool { return repo.IsInitialized(dir) }

// LoadConfig reads config.json from a repo.
func LoadConfig(dir string) (Config, error) { return repo.Load(dir) }

// SaveConfig writes config.json (0600) atomically.
func SaveConfig(dir string, c Config) error { return repo.Save(dir, c) }

// LoadKey reads the repo's identity key.
func LoadKey(dir string, passphrase []byte) (crypto.PrivKey, error) {
	return repo.LoadKey(dir, passphrase)
}

// GrindStamp makes sure the repo at dir holds a maker stamp (p2p/stamp.go)
// of at least bits for id, grinding one (about 2^bits hashes) if not.
func GrindStamp(ctx context.Context, dir string, id peer.ID, bits int) (ground bool, err error) {
	return repo.GrindStamp(ctx, dir, id, bits)
}

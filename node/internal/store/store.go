// Package store is a node's Badger datastore: offers, fills, leases and
// their GPU holds and calendar, receipts, evidence, payments, workload
// output, attestation verdicts and price history. keys.go builds every
// key. Writes on the money path (leases, holds, receipts, evidence,
// payments) are synced and return their errors.
package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Store is a node's datastore. Its methods are safe for concurrent use.
type Store struct {
	db  *badger.DB
	now func() time.Time
	// fault, when set, is asked before every write (FailWrites).
	fault atomic.Pointer[func(key []byte) error]
	// dir and minFree: no write when dir's filesystem has less free
	// (space.go); free, when set, replaces statfs (SetFreeBytes).
	dir     string
	minFree int64
	free    atomic.Pointer[func(dir string) (uint64, error)]
	// stop and done end a Small store's compaction loop (compactLoop).
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
}

// Options configure Open.
type Options struct {
	// Logger takes Badger's logs (its Info at Debug). Default: slog.Default.
	Logger *slog.Logger
	// Now is the clock deciding which holds are live. Default: time.Now.
	Now func() time.Time
	// MinFree is the least free space, in bytes, on the store's
	// filesystem for a write to go ahead (ErrDiskFull); 0: DefaultMinFree,
	// negative: no check.
	MinFree int64
	// Small sizes Badger for a node that holds little and runs beside
	// hundreds of others in one process (a simulation): a 1 MiB memtable
	// (SmallMemTableSize) instead of 8 MiB, a 64 KiB value threshold to
	// match its smaller batches, no block or index cache and no
	// compression (whose blocks would need the cache), and no compactor
	// goroutines: the store compacts level 0 itself (compactLoop). The
	// store stays on disk and behaves the same; a transaction may hold
	// less (badger.ErrTxnTooBig past ~150 KiB of small values).
	Small bool
	// compactEvery is a Small store's compaction check interval (tests
	// shorten it); 0: smallCompactEvery.
	compactEvery time.Duration
	// compactors, when non-zero, runs Badger's own compactors in a Small
	// store instead of compactLoop (the benchmark's baseline).
	compactors int
}

// SmallMemTableSize is the memtable size of a Small store.
const SmallMemTableSize = 1 << 20

// A Small store's level 0: how often compactLoop looks at it, and how many
// tables stall writes (room for 32 MiB of writes between two looks).
const (
	smallCompactEvery = 5 * time.Second
	smallL0Stall      = 32
)

// ErrNotFound is returned when a key is not stored.
var ErrNotFound = errors.New("store: not found")

// Open opens (creating it if needed) the datastore in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{o.Logger}).
		// A market node's working set is small; keep each store modest so a
		// devnet of dozens of nodes fits in one process.
		WithMemTableSize(memTableSize).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8)
	if o.Small {
		// Badger's arena per memtable is the memtable plus a batch
		// (15%) plus the skiplist nodes of that batch: ~1.3 MiB here,
		// ~10.4 MiB at the default; the memtable's file is mapped at
		// the same size.
		opts = opts.WithMemTableSize(SmallMemTableSize).
			WithValueThreshold(64 << 10).
			WithCompression(options.None).
			WithBlockCacheSize(0).
			WithIndexCacheSize(0).
			WithValueLogFileSize(16 << 20).
			WithNumCompactors(0).
			WithNumLevelZeroTablesStall(smallL0Stall)
		if o.compactors > 0 {
			opts = opts.WithNumCompactors(o.compactors)
		}
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if o.MinFree == 0 {
		o.MinFree = DefaultMinFree
	}
	s := &Store{db: db, now: o.Now, dir: dir, minFree: o.MinFree}
	if o.Small && o.compactors == 0 {
		every := o.compactEvery
		if every <= 0 {
			every = smallCompactEvery
		}
		s.stop = make(chan struct{})
		s.done.Add(1)
		go s.compactLoop(every, opts.NumLevelZeroTables, o.Logger)
	}
	return s, nil
}

// compactLoop flattens a Small store (db.Flatten: level 0 and every other
// level into one) once level 0 holds more than l0 tables, looking every
// interval. Badger's own compactors each wake every
// 50 ms whether or not there is anything to do: at 1,000 stores in one
// process (a simulation) that is 40,000 wake-ups a second, and at that
// scale the stack dump of a stalled run had 1,960 of its 22,000 runnable
// goroutines in them. A small store fills a 1 MiB memtable every few
// minutes at most, so one look every few seconds is plenty.
func (s *Store) compactLoop(every time.Duration, l0 int, log *slog.Logger) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if lv := s.db.Levels(); len(lv) == 0 || lv[0].NumTables <= l0 {
			continue
		}
		if err := s.db.Flatten(1); err != nil {
			log.Warn("store: compaction failed", "err", err)
		}
	}
}

// Close closes the datastore.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stopOnce.Do(func() { close(s.stop) })
		s.done.Wait()
	}
	return s.db.Close()
}

// FailWrites makes every later write of a key for which f returns an
// error fail with that error, before anything is written; nil f clears
// it. It is for tests of the paths that handle a failed write.
func (s *Store) FailWrites(f func(key []byte) error) {
	if f == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&f)
}

// set writes one key in txn, unless a fault refuses it.
func (s *Store) set(txn *badger.Txn, k, v []byte) error {
	if f := s.fault.Load(); f != nil {
		if err := (*f)(k); err != nil {
			return err
		}
	}
	return txn.Set(k, v)
}

// del deletes one key in txn, unless a fault refuses it.
func (s *Store) del(txn *badger.Txn, k []byte) error {
	if f := s.fault.Load(); f != nil {
		if err := (*f)(k); err != nil {
			return err
		}
	}
	return txn.Delete(k)
}

// put writes one key.
func (s *Store) put(k, v []byte) error {
	return s.update(func(txn *badger.Txn) error { return s.set(txn, k, v) })
}

// update runs fn in a write transaction, unless the disk is nearly full
// (ErrDiskFull).
func (s *Store) update(fn func(txn *badger.Txn) error) error {
	if err := s.checkSpace(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

// syncUpdate runs fn in a write transaction and syncs it to disk.
func (s *Store) syncUpdate(fn func(txn *badger.Txn) error) error {
	if err := s.update(fn); err != nil {
		return err
	}
	return s.db.Sync()
}

// syncPut writes one key, synced.
func (s *Store) syncPut(k, v []byte) error {
	return s.syncUpdate(func(txn *badger.Txn) error { return s.set(txn, k, v) })
}

// get reads one key's value; ErrNotFound when it is not stored.
func (s *Store) get(k []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, k)
	}
	return v, err
}

// scan calls fn with each key under prefix (the prefix cut off) and value,
// in key order.
func (s *Store) scan(prefix string, fn func(k, v []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(it.Item().KeyCopy(nil)[len(prefix):], v); err != nil {
				return err
			}
		}
		return nil
	})
}

// badgerLogger sends Badger's logs to slog, keeping its chatty Info at Debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug(fmt.Sprintf(f, a...)) }

package collateral

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// Cache keeps the collateral verifications need, refreshes it before it
// goes out of date, and serves the last copy it fetched while the vendor
// fails (down, rate limiting) until that copy's next update: a vendor
// outage does not stop attestation. Entries persist in Dir, so a restart
// does not need the vendor either. It is untrusted like its vendors: the
// verifiers check what it gives.
type Cache struct {
	// Intel fetches Intel collateral (a PCS client); nil: none.
	Intel IntelFetcher
	// AMD fetches AMD collateral (a KDS client); nil: none.
	AMD AMDFetcher
	// Dir, when set, holds the entries across restarts.
	Dir string
	// MaxAge is how long an entry is served before it is fetched again
	// (Intel may publish new TCB info before the next update): 1 h when
	// zero.
	MaxAge time.Duration
	// Timeout bounds a fetch: 30 s when zero.
	Timeout time.Duration
	// MissWait is how long a verification whose collateral the cache
	// lacks waits for the background fetch before it is told to retry:
	// 10 s when zero. Misses are fetched one at a time, in order, by a
	// queue of at most MaxQueue (64 when zero), so a vendor's outage or
	// rate limit holds up only the verifications of platforms the cache
	// has not seen, never those it can serve.
	MissWait time.Duration
	MaxQueue int
	// Now is the clock: time.Now when nil.
	Now func() time.Time
	Log *slog.Logger
	// IntelRoot replaces Intel's root for collateral a cache checks before
	// it raises its marks (tests of foreign roots); nil: Intel's.
	IntelRoot *x509.Certificate

	mu       sync.Mutex
	marks    Marks
	entries  map[string]*entry
	flight   singleflight.Group
	loadOnce sync.Once
	// pending are the misses queued or being fetched, by key; working
	// says a worker drains them.
	pending map[string]*miss
	queue   []string
	working bool
}

// miss is a queued fetch of an entry the cache lacks.
type miss struct {
	fetch fetchFunc
	done  chan struct{}
	err   error
}

// entry is one cached answer, in the form it is persisted.
type entry struct {
	Key        string          `json:"key"`
	Value      json.RawMessage `json:"value"`
	Fetched    time.Time       `json:"fetched"`
	NextUpdate time.Time       `json:"nextUpdate"` // zero: none (a certificate)
	// Tried and Failures pace fetches while the vendor fails; Err is the
	// last failure.
	Tried    time.Time `json:"tried"`
	Failures int       `json:"failures"`
	Err      string    `json:"error,omitempty"`
}

// marksFileName holds the cache's marks in Dir; entries are *.json of a
// hash's hex, which it is not.
const marksFileName = "marks.json"

// maxEntryFile bounds a persisted entry: collateral plus CRLs.
const maxEntryFile = 16 << 20

// ErrExpired is the cache's answer when its copy is past its next update
// and the vendor cannot give a newer one.
var ErrExpired = errors.New("the cached collateral is past its next update")

// fetchFunc fetches a value and says until when it is current.
type fetchFunc func(ctx context.Context) (value any, nextUpdate time.Time, err error)

// get answers key from the cache, fetching when it has none, when its copy
// is older than MaxAge or past its next update, and decodes it into out.
func (c *Cache) get(key string, fetch fetchFunc, out any) error {
	c.loadOnce.Do(c.load)
	now := c.now()
	c.mu.Lock()
	e := c.entries[key]
	fresh := e != nil && (pinned(key) || now.Sub(e.Fetched) < c.maxAge()) && (e.NextUpdate.IsZero() || now.Before(e.NextUpdate))
	// While the vendor fails, a copy is served without asking again until
	// the backoff has passed.
	waiting := e != nil && e.Failures > 0 && now.Sub(e.Tried) < backoff(e.Failures, c.maxAge())
	current := e != nil && (e.NextUpdate.IsZero() || now.Before(e.NextUpdate))
	c.mu.Unlock()
	switch {
	case fresh || waiting:
	case current:
		// A copy still current is refreshed on the verification's path,
		// as before: the vendor's failure then only marks it stale.
		_, _, _ = c.flight.Do(key, func() (any, error) { return nil, c.refresh(key, fetch) })
	default:
		// An expired copy's failed refresh is told as its expiry, below;
		// one still under way as such.
		if err := c.awaitMiss(key, fetch); err != nil && (e == nil || errors.Is(err, errFetching)) {
			return err
		}
	}
	c.mu.Lock()
	e = c.entries[key]
	c.mu.Unlock()
	if e == nil {
		return fmt.Errorf("%s: no copy", key)
	}
	if !e.NextUpdate.IsZero() && now.After(e.NextUpdate) {
		if e.Failures > 0 {
			return fmt.Errorf("%w (%s) and the vendor fails: %s", ErrExpired, e.NextUpdate.UTC().Format(time.RFC3339), e.Err)
		}
		return fmt.Errorf("%w (%s), and it is the newest the vendor has", ErrExpired, e.NextUpdate.UTC().Format(time.RFC3339))
	}
	return json.Unmarshal(e.Value, out)
}

// awaitMiss queues a fetch of key (once however many verifications ask)
// and waits for it at most MissWait.
func (c *Cache) awaitMiss(key string, fetch fetchFunc) error {
	c.mu.Lock()
	m := c.pending[key]
	if m == nil {
		if len(c.queue) >= c.maxQueue() {
			c.mu.Unlock()
			return fmt.Errorf("%s is not cached and %d fetches are queued before it: retry later", key, len(c.queue))
		}
		if c.pending == nil {
			c.pending = map[string]*miss{}
		}
		m = &miss{fetch: fetch, done: make(chan struct{})}
		c.pending[key] = m
		c.queue = append(c.queue, key)
		if !c.working {
			c.working = true
			go c.drain()
		}
	}
	queued := len(c.queue)
	c.mu.Unlock()
	t := time.NewTimer(c.missWait())
	defer t.Stop()
	select {
	case <-m.done:
		return m.err
	case <-t.C:
		return fmt.Errorf("%s is not cached yet: %w (%d in the queue); retry in a few seconds", key, errFetching, queued)
	}
}

// errFetching says a miss is still being fetched.
var errFetching = errors.New("it is being fetched in the background")

// drain fetches the queued misses one at a time until none is left.
func (c *Cache) drain() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.working = false
			c.mu.Unlock()
			return
		}
		key := c.queue[0]
		c.queue = c.queue[1:]
		m := c.pending[key]
		c.mu.Unlock()
		_, err, _ := c.flight.Do(key, func() (any, error) { return nil, c.refresh(key, m.fetch) })
		c.mu.Lock()
		delete(c.pending, key)
		m.err = err
		c.mu.Unlock()
		close(m.done)
	}
}

// refresh fetches key and keeps the answer; on failure the old copy stays,
// marked stale.
func (c *Cache) refresh(key string, fetch fetchFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	defer cancel()
	value, next, err := fetch(ctx)
	now := c.now()
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		old := c.entries[key]
		if old == nil {
			return err
		}
		updated := *old
		updated.Tried, updated.Failures, updated.Err = now, old.Failures+1, err.Error()
		c.entries[key] = &updated
		c.logger().Warn("collateral: the vendor failed, serving the cached copy", "key", key, "fetched", old.Fetched, "nextUpdate", old.NextUpdate, "error", err)
		return err
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return err
	}
	e := &entry{Key: key, Value: raw, Fetched: now, NextUpdate: next, Tried: now}
	c.mu.Lock()
	c.entries[key] = e
	c.mu.Unlock()
	c.persist(e) // outside the lock: verifications go on while it syncs
	return nil
}

// Run refreshes the entries every interval (MaxAge/4 when zero) until ctx
// ends.
func (c *Cache) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = c.maxAge() / 4
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		c.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh fetches again every entry older than MaxAge (or past its next
// update) whose vendor is not in its backoff, so verifications find
// fresh entries.
func (c *Cache) Refresh(ctx context.Context) {
	c.loadOnce.Do(c.load)
	now := c.now()
	c.mu.Lock()
	var due []string
	for key, e := range c.entries {
		old := (!pinned(key) && now.Sub(e.Fetched) >= c.maxAge()) || (!e.NextUpdate.IsZero() && now.After(e.NextUpdate))
		if old && (e.Failures == 0 || now.Sub(e.Tried) >= backoff(e.Failures, c.maxAge())) {
			due = append(due, key)
		}
	}
	c.mu.Unlock()
	for _, key := range due {
		if ctx.Err() != nil {
			return
		}
		if f := c.fetcher(key); f != nil {
			_, _, _ = c.flight.Do(key, func() (any, error) { return nil, c.refresh(key, f) })
		}
	}
}

// Health is what a status and an alert need of the cache.
type Health struct {
	Entries int
	// Stale entries are served while their vendor fails.
	Stale int
	// Expired entries are past their next update: verifications that
	// need them are refused.
	Expired int
	// NextUpdate is the earliest next update of any entry.
	NextUpdate time.Time
	// LastError is the latest failure of a stale entry.
	LastError string
}

// Health reports the entries' state.
func (c *Cache) Health() Health {
	c.loadOnce.Do(c.load)
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	h := Health{Entries: len(c.entries)}
	var latest time.Time
	for _, e := range c.entries {
		if !e.NextUpdate.IsZero() && (h.NextUpdate.IsZero() || e.NextUpdate.Before(h.NextUpdate)) {
			h.NextUpdate = e.NextUpdate
		}
		if e.Failures > 0 {
			h.Stale++
			if e.Tried.After(latest) {
				latest, h.LastError = e.Tried, e.Err
			}
		}
		if !e.NextUpdate.IsZero() && now.After(e.NextUpdate) {
			h.Expired++
		}
	}
	return h
}

// backoff is the pause after n failures: 10 s doubling, at most max.
func backoff(n int, maxPause time.Duration) time.Duration {
	d := 10 * time.Second
	for i := 1; i < n && d < maxPause; i++ {
		d *= 2
	}
	return min(d, maxPause)
}

func (c *Cache) persist(e *entry) {
	if c.Dir == "" {
		return
	}
	raw, err := json.Marshal(e)
	if err == nil {
		err = os.MkdirAll(c.Dir, 0o700)
	}
	if err == nil {
		_, err = atomicfile.WriteIfChanged(filepath.Join(c.Dir, fileName(e.Key)), raw, 0o600)
	}
	if err != nil {
		c.logger().Warn("collateral: not persisted; kept in memory", "key", e.Key, "error", err)
	}
}

// load reads the persisted entries; a file that does not read is
// skipped: it is only a cache.
func (c *Cache) load() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*entry{}
	}
	if c.Dir == "" {
		return
	}
	c.marks.File = filepath.Join(c.Dir, marksFileName)
	files, _ := filepath.Glob(filepath.Join(c.Dir, "*.json"))
	for _, f := range files {
		if filepath.Base(f) == marksFileName {
			continue
		}
		if st, err := os.Stat(f); err != nil || st.Size() > maxEntryFile {
			continue
		}
		raw, err := os.ReadFile(f)
		var e *entry
		if err == nil {
			e, err = decodeEntry(raw)
		}
		if err != nil || fileName(e.Key) != filepath.Base(f) {
			c.logger().Warn("collateral: skipping an unreadable cache file", "file", f, "error", err)
			continue
		}
		c.entries[e.Key] = e
	}
}

// decodeEntry reads a persisted entry strictly: unknown fields, a
// missing key or value, or trailing data are refused.
func decodeEntry(raw []byte) (*entry, error) {
	if len(raw) > maxEntryFile {
		return nil, fmt.Errorf("a cache entry of %d bytes: at most %d", len(raw), maxEntryFile)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e entry
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("a cache entry: %w", err)
	}
	if dec.More() {
		return nil, errors.New("a cache entry: data after it")
	}
	if e.Key == "" || len(e.Key) > 512 || len(e.Value) == 0 {
		return nil, errors.New("a cache entry without its key or value")
	}
	return &e, nil
}

func fileName(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:16]) + ".json"
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) maxAge() time.Duration {
	if c.MaxAge > 0 {
		return c.MaxAge
	}
	return time.Hour
}

func (c *Cache) missWait() time.Duration {
	if c.MissWait > 0 {
		return c.MissWait
	}
	return 10 * time.Second
}

func (c *Cache) maxQueue() int {
	if c.MaxQueue > 0 {
		return c.MaxQueue
	}
	return 64
}

func (c *Cache) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 30 * time.Second
}

func (c *Cache) logger() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.New(slog.DiscardHandler)
}

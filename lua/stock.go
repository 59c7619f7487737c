package lua

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTombstoneTTL is how long a hold-end tombstone refuses late
// reserves and recognises repeated releases and commits. It must outlast
// every retry of a stock activity; a week is far beyond any retry policy
// the saga uses, and a tombstone costs a few dozen bytes.
const DefaultTombstoneTTL = 7 * 24 * time.Hour

// maxTombstoneTTL bounds the TTL so it fits the scripts' ARGV check.
const maxTombstoneTTL = 315_360_000 * time.Second // ten years

// Client is the part of go-redis this package needs: scripts, plus HMGET
// for Level and a pipeline for Precheck. *redis.Client, *redis.ClusterClient
// and *redis.Ring satisfy it.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HScan(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipeline() redis.Pipeliner
}

// Stock holds, releases and commits units of SKUs in Redis. It is safe for
// concurrent use.
type Stock struct {
	rdb          Client
	tombstoneTTL int64 // seconds
	gens         *gens // shared by copies (WithTombstoneTTL)
}

// New returns a Stock on rdb whose tombstones live DefaultTombstoneTTL.
func New(rdb Client) *Stock {
	return &Stock{rdb: rdb, tombstoneTTL: ttlSeconds(DefaultTombstoneTTL), gens: &gens{}}
}

// gens is the highest gen this process has seen of each SKU. Every script that changes a
// SKU bumps its gen in Redis (stock:{sku}.gen), so gen only grows; the hold scripts refuse
// with ErrRolledBack when Redis shows a lower gen than one seen here, which means Redis went
// back in time (a restart from an older snapshot, a failover to a lagging replica) and may
// have lost holds. The caller then resyncs the SKU from Postgres before any unit moves.
type gens struct{ m sync.Map } // sku -> int64

func (g *gens) seen(sku string) int64 {
	if v, ok := g.m.Load(sku); ok {
		return v.(int64)
	}
	return 0
}

// observe raises the SKU's gen to gen; it never lowers it.
func (g *gens) observe(sku string, gen int64) {
	for {
		v, loaded := g.m.LoadOrStore(sku, gen)
		if !loaded {
			return
		}
		if v.(int64) >= gen || g.m.CompareAndSwap(sku, v, gen) {
			return
		}
	}
}

// SeenGen is the highest gen of sku this Stock has seen (0: none), for resyncs that must
// start above it.
func (s *Stock) SeenGen(sku string) int64 { return s.gens.seen(sku) }

// WithTombstoneTTL returns a copy of s whose tombstones live d, rounded up
// to whole seconds and kept within 1 second to 10 years.
func (s *Stock) WithTombstoneTTL(d time.Duration) *Stock {
	c := *s
	c.tombstoneTTL = ttlSeconds(d)
	return &c
}

func ttlSeconds(d time.Duration) int64 {
	d = min(max(d, time.Second), maxTombstoneTTL)
	return int64((d + time.Second - 1) / time.Second)
}

// Level is a SKU's stock as Redis sees it. Stocked is false when the SKU was
// never loaded with SetStock; the numbers are then zero.
type Level struct {
	Available, Held, MaxPerOrder int64
	Stocked                      bool
	// Gen counts the SKU's changes in Redis (see gens).
	Gen int64
}

// Holds lists a SKU's live holds.
func (s *Stock) Holds(ctx context.Context, sku string) ([]Hold, error) {
	c := call{op: opLevel, sku: sku}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, HoldsKey(sku)).Result()
	if err != nil {
		return nil, fmt.Errorf("list holds of %s: %w", sku, err)
	}
	holds := make([]Hold, 0, len(m))
	for id, q := range m {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("list holds of %s: hold of %s is %q: %w", sku, id, q, err)
		}
		holds = append(holds, Hold{CheckoutID: id, Quantity: n})
	}
	return holds, nil
}

// Level reads sku's stock with a plain HMGET. The three fields are read in
// one command, so they are consistent with each other.
func (s *Stock) Level(ctx context.Context, sku string) (Level, error) {
	c := call{op: opLevel, sku: sku}
	if err := c.validate(); err != nil {
		return Level{}, err
	}
	vals, err := s.rdb.HMGet(ctx, StockKey(sku), "available", "held", "max_per_order", "gen").Result()
	if err != nil {
		return Level{}, fmt.Errorf("%s: hmget: %w", c, err)
	}
	var nums [4]int64
	var l Level
	for i, v := range vals {
		if v == nil {
			continue
		}
		l.Stocked = l.Stocked || i < 3
		str, ok := v.(string)
		if !ok {
			return Level{}, fmt.Errorf("%s: unexpected %T in stock hash", c, v)
		}
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return Level{}, fmt.Errorf("%s: parse stock hash: %w", c, err)
		}
		nums[i] = n
	}
	l.Available, l.Held, l.MaxPerOrder, l.Gen = nums[0], nums[1], nums[2], nums[3]
	return l, nil
}

const (
	opReserve op = iota + 1
	opRelease
	opCommit
	opSetStock
	opLevel
	opRebuild
	opReconcile
	opForfeit
	opStage
	opSweep
)

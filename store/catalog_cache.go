package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/singleflight"

	"github.com/checkout-saga/checkout-saga/shop"
)

// DefaultCatalogTTL is how long the API's catalog answers from memory. An operator's change
// of price, max_per_order or a new SKU reaches the API's first check within it; nothing
// else depends on it (see CatalogCache).
const DefaultCatalogTTL = time.Second

// DefaultCatalogCacheSize is how many SKUs the cache remembers of each kind, known and
// unknown: far more than a sale's SKUs, and at a few hundred bytes an entry about 5 MiB at
// most for both. Past it the least recently asked SKU is forgotten, which costs one more
// Postgres read when it is asked again.
const DefaultCatalogCacheSize = 10_000

// ProductReader reads SKUs' catalog rows; *Store is one.
type ProductReader interface {
	Products(ctx context.Context, skus []string) (map[string]shop.Product, error)
}

// CatalogCache answers the API's catalog check (unknown SKU, mixed currency, over
// max_per_order: 422 before any saga) from memory for up to TTL, so a flash-sale crowd of
// losers does not read Postgres once per request. Concurrent misses of the same SKUs share
// one read (singleflight), and an unknown SKU is remembered as unknown, so a crowd asking for
// it costs one read per TTL too. Errors are never cached.
//
// Memory is bounded: each kind of entry, known SKUs and unknown ones, is a least recently
// used list of at most Size SKUs. Anyone may ask for SKUs that do not exist, as many as they
// like, so unknown SKUs have a list of their own: a flood of made-up names only pushes out
// other made-up names, never the SKUs a sale is selling.
//
// Staleness is bounded by TTL and harmless beyond a wrong 422 or a wrong pass of the first
// check within it: the saga prices the cart from Postgres (RecordCheckout) and the reserve
// script judges max_per_order in Redis, so a stale entry never sells at a wrong price or over
// a limit.
type CatalogCache struct {
	Reader ProductReader
	TTL    time.Duration
	// Size bounds each kind of entry, known and unknown SKUs (DefaultCatalogCacheSize when
	// 0); it is read when the first answer is remembered.
	Size int
	now  func() time.Time // for tests; time.Now when nil

	mu      sync.Mutex
	known   *simplelru.LRU[string, catalogEntry]
	unknown *simplelru.LRU[string, catalogEntry]
	epoch   uint64 // counts Forget calls: a read that started before one is not remembered
	group   singleflight.Group
}

type catalogEntry struct {
	product shop.Product
	known   bool
	readAt  time.Time
}

// NewCatalogCache caches r's answers for ttl, at most size SKUs of each kind (known and
// unknown; DefaultCatalogCacheSize when size is 0).
func NewCatalogCache(r ProductReader, ttl time.Duration, size int) *CatalogCache {
	return &CatalogCache{Reader: r, TTL: ttl, Size: size}
}

// Len is how many SKUs the cache remembers, known and unknown.
func (c *CatalogCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		return 0
	}
	return c.known.Len() + c.unknown.Len()
}

// Products answers every fresh SKU from memory and reads the rest once.
func (c *CatalogCache) Products(ctx context.Context, skus []string) (map[string]shop.Product, error) {
	out := make(map[string]shop.Product, len(skus))
	missing, epoch := c.fromMemory(skus, out)
	if len(missing) == 0 {
		return out, nil
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	key := strconv.FormatUint(epoch, 10) + "\x00" + strings.Join(missing, "\x00")
	read, err, _ := c.group.Do(key, func() (any, error) {
		products, err := c.Reader.Products(ctx, missing)
		if err != nil {
			return nil, err
		}
		c.remember(missing, products, epoch)
		return products, nil
	})
	if err != nil {
		return nil, err
	}
	for sku, p := range read.(map[string]shop.Product) {
		out[sku] = p
	}
	return out, nil
}

// Forget drops what the cache knows of sku, for a change made through this process (an
// operator's PUT): this API's next check reads Postgres. Other processes see the change
// within their TTL.
func (c *CatalogCache) Forget(sku string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known != nil {
		c.known.Remove(sku)
		c.unknown.Remove(sku)
	}
	c.epoch++
}

// fromMemory copies the fresh known SKUs into out and returns the SKUs to read, with the
// epoch the read starts in.
func (c *CatalogCache) fromMemory(skus []string, out map[string]shop.Product) ([]string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing []string
	if c.known == nil {
		return skus, c.epoch
	}
	now := c.clock()
	for _, sku := range skus {
		e, ok := c.known.Get(sku)
		if !ok {
			e, ok = c.unknown.Get(sku)
		}
		switch {
		case !ok || now.Sub(e.readAt) >= c.TTL:
			missing = append(missing, sku)
		case e.known:
			out[sku] = e.product
		}
	}
	return missing, c.epoch
}

// remember keeps a read's answers, unless a Forget came since it started (it may predate the
// change).
func (c *CatalogCache) remember(skus []string, products map[string]shop.Product, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	if c.known == nil {
		size := c.Size
		if size <= 0 {
			size = DefaultCatalogCacheSize
		}
		// NewLRU fails only for a size below 1.
		c.known, _ = simplelru.NewLRU[string, catalogEntry](size, nil)
		c.unknown, _ = simplelru.NewLRU[string, catalogEntry](size, nil)
	}
	now := c.clock()
	for _, sku := range skus {
		p, known := products[sku]
		e := catalogEntry{product: p, known: known, readAt: now}
		// A SKU lives in one list: one created since it was last read leaves the unknown
		// list, one deleted leaves the known list.
		if known {
			c.unknown.Remove(sku)
			c.known.Add(sku, e)
		} else {
			c.known.Remove(sku)
			c.unknown.Add(sku, e)
		}
	}
}

func (c *CatalogCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

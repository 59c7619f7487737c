package store

import (
	"context"
	"crypto/rand"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// countingReader counts the reads that reach the real store.
type countingReader struct {
	ProductReader
	reads atomic.Int64
	fail  atomic.Bool
}

func (r *countingReader) Products(ctx context.Context, skus []string) (map[string]shop.Product, error) {
	r.reads.Add(1)
	if r.fail.Load() {
		return nil, errors.New("postgres is down")
	}
	return r.ProductReader.Products(ctx, skus)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func newCache(t *testing.T) (*CatalogCache, *countingReader, *fakeClock, func(sku string, price int64)) {
	_, pool := testenv.Postgres(t)
	reader := &countingReader{ProductReader: New(pool)}
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	c := NewCatalogCache(reader, time.Second, 0)
	c.now = clock.now
	put := func(sku string, price int64) { testenv.PutSKU(t, pool, sku, 10, price, "usd") }
	return c, reader, clock, put
}

func TestCatalogCacheAnswersFromMemoryForTheTTLThenReadsPostgresAgain(t *testing.T) {
	c, reader, clock, put := newCache(t)
	put("PHONE", 100)
	for range 3 {
		got, err := c.Products(t.Context(), []string{"PHONE", "GHOST"})
		if err != nil {
			t.Fatal(err)
		}
		if got["PHONE"].PriceCents != 100 || len(got) != 1 {
			t.Fatalf("products %+v, want PHONE at 100 and no GHOST", got)
		}
	}
	if n := reader.reads.Load(); n != 1 {
		t.Fatalf("%d reads of Postgres for three checks within the TTL, want 1 (an unknown SKU is remembered too)", n)
	}

	put("PHONE", 200)
	put("GHOST", 5)
	clock.add(999 * time.Millisecond)
	if got, _ := c.Products(t.Context(), []string{"PHONE", "GHOST"}); got["PHONE"].PriceCents != 100 || len(got) != 1 {
		t.Fatalf("within the TTL: %+v, want the remembered answer", got)
	}
	clock.add(time.Millisecond)
	got, err := c.Products(t.Context(), []string{"PHONE", "GHOST"})
	if err != nil {
		t.Fatal(err)
	}
	if got["PHONE"].PriceCents != 200 || got["GHOST"].PriceCents != 5 {
		t.Fatalf("after the TTL: %+v, want Postgres's new rows", got)
	}
}

func TestCatalogCacheConcurrentMissesShareOneRead(t *testing.T) {
	c, reader, _, put := newCache(t)
	put("PHONE", 100)
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if got, err := c.Products(t.Context(), []string{"PHONE"}); err != nil || got["PHONE"].PriceCents != 100 {
				t.Errorf("products %+v, %v", got, err)
			}
		})
	}
	wg.Wait()
	// Goroutines that start after the first read ended answer from memory; those that
	// started during it wait for it. Either way far fewer reads than requests.
	if n := reader.reads.Load(); n > 5 {
		t.Fatalf("%d reads of Postgres for 200 concurrent checks, want a handful", n)
	}
}

func TestCatalogCacheNeverRemembersAnError(t *testing.T) {
	c, reader, _, put := newCache(t)
	put("PHONE", 100)
	reader.fail.Store(true)
	if _, err := c.Products(t.Context(), []string{"PHONE"}); err == nil {
		t.Fatal("a failed read answered without an error")
	}
	reader.fail.Store(false)
	got, err := c.Products(t.Context(), []string{"PHONE"})
	if err != nil || got["PHONE"].PriceCents != 100 {
		t.Fatalf("after Postgres came back: %+v, %v; want PHONE read again", got, err)
	}
}

func TestCatalogCacheForgetsASKUChangedThroughThisProcess(t *testing.T) {
	c, _, _, put := newCache(t)
	put("PHONE", 100)
	if got, _ := c.Products(t.Context(), []string{"PHONE", "NEW"}); got["PHONE"].PriceCents != 100 {
		t.Fatalf("products %+v", got)
	}
	put("PHONE", 200)
	put("NEW", 7)
	c.Forget("PHONE")
	c.Forget("NEW")
	got, err := c.Products(t.Context(), []string{"PHONE", "NEW"})
	if err != nil || got["PHONE"].PriceCents != 200 || got["NEW"].PriceCents != 7 {
		t.Fatalf("after Forget: %+v, %v; want Postgres's rows at once", got, err)
	}
}

// A read that began before a Forget may carry the old row: it must not be remembered.
func TestCatalogCacheDoesNotRememberAReadThatBeganBeforeAForget(t *testing.T) {
	c, reader, _, put := newCache(t)
	put("PHONE", 100)
	_, epoch := c.fromMemory([]string{"PHONE"}, map[string]shop.Product{})
	old, err := reader.Products(t.Context(), []string{"PHONE"})
	if err != nil {
		t.Fatal(err)
	}
	put("PHONE", 200)
	c.Forget("PHONE")
	c.remember([]string{"PHONE"}, old, epoch)
	if got, _ := c.Products(t.Context(), []string{"PHONE"}); got["PHONE"].PriceCents != 200 {
		t.Fatalf("price %d after the change, want 200: a stale read was remembered", got["PHONE"].PriceCents)
	}
}

// catalogOf answers from a fixed catalog and counts how often each of its SKUs is read.
type catalogOf struct {
	products map[string]shop.Product
	mu       sync.Mutex
	reads    map[string]int
}

func (r *catalogOf) Products(_ context.Context, skus []string) (map[string]shop.Product, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]shop.Product{}
	for _, sku := range skus {
		if p, ok := r.products[sku]; ok {
			r.reads[sku]++
			out[sku] = p
		}
	}
	return out, nil
}

// Anyone may ask for SKUs that do not exist: 100,000 carts, each of a real SKU and a made-up
// one, leave the cache at most its size of made-up SKUs, and the real SKU is still answered
// from memory (read once) however many made-up names came after it.
func TestCatalogCacheForgetsTheLeastRecentUnknownSKUsPastItsSize(t *testing.T) {
	const size, lookups = 1_000, 100_000
	reader := &catalogOf{products: map[string]shop.Product{"PHONE": {SKU: "PHONE", SaleTerms: shop.SaleTerms{PriceCents: 100, Currency: "usd", MaxPerOrder: 2}}}, reads: map[string]int{}}
	c := NewCatalogCache(reader, time.Hour, size)
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	c.now = clock.now

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range lookups {
		made := "FAKE-" + rand.Text() + rand.Text() // 57 characters, as a script would send
		got, err := c.Products(t.Context(), []string{"PHONE", made})
		if err != nil {
			t.Fatal(err)
		}
		if got["PHONE"].PriceCents != 100 || len(got) != 1 {
			t.Fatalf("products %+v, want PHONE only", got)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d lookups of made-up SKUs: %d entries kept, heap in use %+.1f MiB", lookups, c.Len(),
		float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))

	if n := c.Len(); n > 2*size {
		t.Fatalf("%d entries after %d made-up SKUs, want at most %d (size %d of each kind)", n, lookups, 2*size, size)
	}
	if n := c.unknown.Len(); n != size {
		t.Errorf("%d unknown SKUs kept, want the %d most recent", n, size)
	}
	if n := reader.reads["PHONE"]; n != 1 {
		t.Errorf("PHONE read %d times within its TTL, want once: the made-up SKUs pushed it out", n)
	}
}

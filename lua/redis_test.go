package lua

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultTestRedisURL uses DB 15 to stay clear of the local stack's DB 0.
const defaultTestRedisURL = "redis://127.0.0.1:6379/15"

// testClient connects to the real Redis at TEST_REDIS_URL (or DB 15 on
// localhost). An unreachable Redis fails the test: these tests are the
// proof that the scripts work, so skipping would hide that they did not run.
func testClient(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		url = defaultTestRedisURL
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse TEST_REDIS_URL %q: %v", url, err)
	}
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s is unreachable (%v); these tests need a real Redis 7: start one, or set TEST_REDIS_URL", url, err)
	}
	return rdb
}

// testSKU returns a fresh SKU name and deletes every key carrying it when
// the test ends.
func testSKU(t testing.TB, rdb *redis.Client) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	sku := "T-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "*{"+sku+"}*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan keys of %s: %v", sku, err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("delete keys of %s: %v", sku, err)
			}
		}
	})
	return sku
}

// stocked returns a Stock and a fresh SKU loaded with onHand units.
func stocked(t testing.TB, onHand, maxPerOrder int64) (*Stock, *redis.Client, string) {
	t.Helper()
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	s := New(rdb)
	if _, err := s.SetStock(t.Context(), sku, onHand, maxPerOrder); err != nil {
		t.Fatalf("set stock: %v", err)
	}
	return s, rdb, sku
}

// reserved is stocked with one hold already placed: quantity units for checkoutID.
func reserved(t testing.TB, onHand, maxPerOrder int64, checkoutID string, quantity int64) (*Stock, *redis.Client, string) {
	t.Helper()
	s, rdb, sku := stocked(t, onHand, maxPerOrder)
	if _, err := s.Reserve(t.Context(), sku, checkoutID, quantity); err != nil {
		t.Fatalf("reserve %d of %s for %s: %v", quantity, sku, checkoutID, err)
	}
	return s, rdb, sku
}

// assertLevel checks the stock hash and that the holds hash agrees with it:
// HLEN == holds and the sum of its quantities == held.
func assertLevel(t *testing.T, s *Stock, rdb *redis.Client, sku string, available, held int64, holds int) {
	t.Helper()
	ctx := t.Context()
	l, err := s.Level(ctx, sku)
	if err != nil {
		t.Fatalf("level: %v", err)
	}
	if !l.Stocked || l.Available != available || l.Held != held {
		t.Errorf("level = %+v, want available %d held %d stocked", l, available, held)
	}
	vals, err := rdb.HVals(ctx, HoldsKey(sku)).Result()
	if err != nil {
		t.Fatalf("hvals: %v", err)
	}
	var sum int64
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("holds hash value %q: %v", v, err)
		}
		sum += n
	}
	if len(vals) != holds || sum != held {
		t.Errorf("holds hash has %d holds summing to %d, want %d summing to %d", len(vals), sum, holds, held)
	}
}

// commandLog records the names of commands a client sends.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.mu.Lock()
		l.names = append(l.names, cmd.Name())
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			l.names = append(l.names, c.Name())
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *commandLog) reset() {
	l.mu.Lock()
	l.names = nil
	l.mu.Unlock()
}

func (l *commandLog) commands() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

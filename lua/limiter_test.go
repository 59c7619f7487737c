package lua

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// go-redis/redis_rate counts the same through CoalescedScripts as through the client: a
// crowd at once is allowed exactly its burst, and a script Redis has not loaded (NOSCRIPT)
// is loaded by the limiter's EVAL, which goes straight to the client.
func TestCoalescedScriptsCountAsThePlainClient(t *testing.T) {
	t.Parallel()
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	limiter := redis_rate.NewLimiter(NewCoalescedScripts(rdb))
	limit := redis_rate.Limit{Rate: 10, Burst: 10, Period: time.Minute}
	key := "coalesce-{" + sku + "}"
	t.Cleanup(func() { rdb.Del(context.Background(), "rate:"+key) })
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			res, err := limiter.Allow(t.Context(), key, limit)
			if err != nil {
				t.Errorf("allow: %v", err)
				return
			}
			allowed.Add(int64(res.Allowed))
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 10 {
		t.Errorf("%d of 40 allowed at once, want the burst of 10", n)
	}

	// A script of its own, never loaded: EVALSHA answers NOSCRIPT, Run loads it by EVAL.
	script := redis.NewScript(fmt.Sprintf("-- %s\nreturn redis.call('INCR', KEYS[1])", sku))
	n, err := script.Run(t.Context(), NewCoalescedScripts(rdb), []string{"coalesce:{" + sku + "}:script"}).Int64()
	if err != nil || n != 1 {
		t.Errorf("a script not loaded yet: %d, %v; want 1", n, err)
	}
	n, err = script.Run(t.Context(), NewCoalescedScripts(rdb), []string{"coalesce:{" + sku + "}:script"}).Int64()
	if err != nil || n != 2 {
		t.Errorf("the script once loaded: %d, %v; want 2", n, err)
	}
}

// The API's limiter counts as go-redis/redis_rate does, and names a limit the same way.
func TestRateLimiterCountsAsRedisRateDoes(t *testing.T) {
	rdb := testClient(t)
	limiter := NewRateLimiter(NewCoalescedScripts(rdb))
	limit := shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}
	key := "rate-test:" + t.Name() + time.Now().String()
	t.Cleanup(func() { rdb.Del(context.Background(), "rate:"+key) })
	for i := range 4 {
		a, err := limiter.Allow(t.Context(), key, limit)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; a.Allowed != want || !want && a.RetryAfter <= 0 {
			t.Fatalf("request %d: %+v, want allowed %v (and a retry time once refused)", i+1, a, want)
		}
	}
	if got, want := limit.String(), (redis_rate.Limit{Rate: 3, Burst: 3, Period: time.Minute}).String(); got != want {
		t.Errorf("limit reads %q, redis_rate's %q", got, want)
	}
}

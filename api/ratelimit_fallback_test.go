package api_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
)

// downRedis is a Redis client pointed at a port nothing listens on: every command fails at
// once with a refused connection.
func downRedis(t *testing.T) *redis.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// With the limiter's Redis down the limits still hold, counted in this process: a script
// gets its address's share and 429 after, another address its own, and the metric and the
// log say that the limits are counted locally.
func TestLimitsHoldInProcessWhileRedisIsDown(t *testing.T) {
	h := newHarness(t, func(_ *api.Config, d *api.Deps) {
		d.RateLimits = &api.RateLimits{Limiter: lua.NewRateLimiter(downRedis(t)),
			CheckoutsPerAddress: shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}}
	})
	before := testutil.ToFloat64(metrics.RateLimitsCountedLocally)
	run := testenv.RandomID("")
	addr := fmt.Sprintf("10.%d.%d.%d", rand.N(256), rand.N(256), rand.N(254)+1)
	answers := map[int]int{}
	for i := range 8 {
		answers[h.postFrom(t, addr, fmt.Sprintf("u-%s-%d", run, i), fmt.Sprintf("c-%s-%d", run, i)).Code]++
	}
	if answers[http.StatusUnprocessableEntity] != 3 || answers[http.StatusTooManyRequests] != 5 {
		t.Errorf("8 checkouts from one address with 3 to spend and Redis down: %v; want 3 x 422 and 5 x 429", answers)
	}
	if rec := h.postFrom(t, "203.0.113.77", "u-other-"+run, "c-other-"+run); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("another address with Redis down: %d, want 422, its own share", rec.Code)
	}
	if got := testutil.ToFloat64(metrics.RateLimitsCountedLocally) - before; got != 9 {
		t.Errorf("checkout_rate_limits_counted_locally_total rose by %v, want 9 (one per count)", got)
	}
}

package lua

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// TestConcurrentReserveNeverOversells races 1,000 reserves for distinct
// checkouts against 100 units, max 2 per order, and checks that exactly 100
// units end up held and none are left.
//
// Why the storm runs in two waves: with quantities of 1 or 2 in random
// order, a single storm can legitimately end with 1 unit available and
// every remaining request asking for 2, so "stock at zero" would be luck,
// not a property. Wave one is 900 goroutines asking for 1 or 2 at random,
// released together by a start gate; it takes whatever it can and must
// never oversell. Wave two starts after wave one has finished: 100
// goroutines asking for 1 each, which can always drain whatever wave one
// left (at most 100 units) to exactly zero. Both waves are fully concurrent
// within themselves, and the invariants are checked after each.
func TestConcurrentReserveNeverOversells(t *testing.T) {
	const (
		units       = 100
		maxPerOrder = 2
		firstWave   = 900
		secondWave  = 100
	)
	rdb := testClient(t, func(o *redis.Options) {
		o.PoolSize = 64
		o.PoolTimeout = 30 * time.Second
	})
	sku := testSKU(t, rdb)
	s := New(rdb)
	ctx := t.Context()
	if _, err := s.SetStock(ctx, sku, units, maxPerOrder); err != nil {
		t.Fatalf("set stock: %v", err)
	}

	var (
		heldSum   atomic.Int64
		successes atomic.Int64
		refusals  atomic.Int64
		errsMu    sync.Mutex
		errs      []error
	)
	storm := func(wave string, n int, quantity func() int64) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			q := quantity()
			checkout := fmt.Sprintf("%s-%d", wave, i)
			wg.Go(func() {
				<-start
				res, err := s.Reserve(ctx, sku, checkout, q)
				var out *OutOfStockError
				switch {
				case err == nil:
					if res.AlreadyHeld || res.Held != q || res.Available < 0 {
						errsMu.Lock()
						errs = append(errs, fmt.Errorf("reserve %d for %s = %+v", q, checkout, res))
						errsMu.Unlock()
					}
					heldSum.Add(res.Held)
					successes.Add(1)
				case errors.As(err, &out):
					if out.Available >= q || out.Available < 0 {
						errsMu.Lock()
						errs = append(errs, fmt.Errorf("refused with %d available for %d: %w", out.Available, q, err))
						errsMu.Unlock()
					}
					refusals.Add(1)
				default:
					errsMu.Lock()
					errs = append(errs, err)
					errsMu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
	}

	// Quantities are drawn before the goroutines start, so the test's own
	// randomness is not shared between them.
	storm("w1", firstWave, func() int64 { return 1 + rand.Int64N(maxPerOrder) })
	afterFirst, err := s.Level(ctx, sku)
	if err != nil {
		t.Fatalf("level after wave one: %v", err)
	}
	if afterFirst.Available < 0 || afterFirst.Available+afterFirst.Held != units || afterFirst.Held != heldSum.Load() {
		t.Fatalf("after wave one: level %+v with successful quantities summing to %d; want available >= 0, available+held == %d, held == that sum",
			afterFirst, heldSum.Load(), units)
	}
	storm("w2", secondWave, func() int64 { return 1 })

	for _, err := range errs {
		t.Errorf("unexpected outcome: %v", err)
	}
	if got := successes.Load() + refusals.Load(); got != firstWave+secondWave {
		t.Errorf("%d reserves accounted for, want %d", got, firstWave+secondWave)
	}
	if heldSum.Load() != units {
		t.Errorf("successful reserves hold %d units, want exactly %d", heldSum.Load(), units)
	}
	assertLevel(t, s, rdb, sku, 0, units, int(successes.Load()))
	t.Logf("wave one left %d available; %d reserves held %d units, %d refused as out of stock",
		afterFirst.Available, successes.Load(), heldSum.Load(), refusals.Load())
}

// benchStock is a SKU that never runs out (a billion units, one per order) with the
// scripts preloaded, so a benchmark measures the scripts and not the first EVAL.
func benchStock(b *testing.B) (*Stock, string) {
	rdb := testClient(b)
	sku := testSKU(b, rdb)
	s := New(rdb).WithTombstoneTTL(time.Minute)
	if _, err := s.SetStock(b.Context(), sku, 1_000_000_000, 1); err != nil {
		b.Fatalf("set stock: %v", err)
	}
	if err := s.Preload(b.Context()); err != nil {
		b.Fatalf("preload: %v", err)
	}
	return s, sku
}

// BenchmarkReserve measures a reserve and its release, the saga's
// compensation path, from parallel goroutines on distinct checkouts.
func BenchmarkReserve(b *testing.B) {
	s, sku := benchStock(b)
	ctx := b.Context()
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			checkout := fmt.Sprintf("b-%d", next.Add(1))
			if _, err := s.Reserve(ctx, sku, checkout, 1); err != nil {
				b.Errorf("reserve: %v", err)
				return
			}
			if _, err := s.Release(ctx, sku, checkout); err != nil {
				b.Errorf("release: %v", err)
				return
			}
		}
	})
}

// BenchmarkHoldRate measures holds per second through the reserve script alone, from
// parallel goroutines on distinct checkouts of one hot SKU (the flash sale's hot path). It
// reports holds/s so a change to reserve.lua can be compared before and after:
//
//	go test -run '^$' -bench BenchmarkHoldRate -benchtime 20000x ./lua/
//
// Beside the shared Redis it runs a master of its own with one replica, where each hold is
// followed by WAIT 1 (the hold acknowledged by the replica before the caller goes on, so a
// failover to that replica keeps it) or not, at 2 and 64 callers: what WAIT would cost a hold.
func BenchmarkHoldRate(b *testing.B) {
	b.Run("shared", func(b *testing.B) {
		s, sku := benchStock(b)
		holdRate(b, 1, func() (*Stock, func(context.Context) error, func()) { return s, nil, func() {} }, sku)
	})
	master := testenv.StartRedisServer(b)
	testenv.StartRedisReplica(b, master)
	rdb := master.Client()
	for _, callers := range []int{1, 32} { // x GOMAXPROCS goroutines
		for _, wait := range []bool{false, true} {
			name := fmt.Sprintf("replica/parallelism-%d/no-wait", callers)
			if wait {
				name = fmt.Sprintf("replica/parallelism-%d/wait-1", callers)
			}
			b.Run(name, func(b *testing.B) {
				sku := testSKU(b, rdb)
				if _, err := New(rdb).SetStock(b.Context(), sku, 1_000_000_000, 1); err != nil {
					b.Fatalf("set stock: %v", err)
				}
				var unacked atomic.Int64
				holdRate(b, callers, func() (*Stock, func(context.Context) error, func()) {
					// WAIT counts the writes of its own connection: the hold and its WAIT share one.
					conn := rdb.Conn()
					afterHold := func(ctx context.Context) error {
						n, err := conn.Do(ctx, "WAIT", 1, holdWaitTimeout.Milliseconds()).Int()
						if err == nil && n < 1 {
							unacked.Add(1)
						}
						return err
					}
					if !wait {
						afterHold = nil
					}
					return New(conn).WithTombstoneTTL(time.Minute), afterHold, func() { _ = conn.Close() }
				}, sku)
				b.ReportMetric(float64(unacked.Load()), "unacked")
			})
		}
	}
}

// holdWaitTimeout bounds a WAIT after a hold: a hold the replica has not acknowledged by then
// is counted (unacked) rather than waited for.
const holdWaitTimeout = 100 * time.Millisecond

// holdRate reserves one unit of sku per call for a new checkout, from parallelism x
// GOMAXPROCS goroutines, each with the Stock open returns (and, when afterHold is not nil,
// calling it after each hold), and reports holds/s.
func holdRate(b *testing.B, parallelism int, open func() (s *Stock, afterHold func(context.Context) error, done func()), sku string) {
	ctx := b.Context()
	var next atomic.Int64
	b.SetParallelism(parallelism)
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s, afterHold, done := open()
		defer done()
		for pb.Next() {
			if _, err := s.Reserve(ctx, sku, fmt.Sprintf("h-%d", next.Add(1)), 1); err != nil {
				b.Errorf("reserve: %v", err)
				return
			}
			if afterHold != nil {
				if err := afterHold(ctx); err != nil {
					b.Errorf("after the hold: %v", err)
					return
				}
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "holds/s")
}

// BenchmarkReserveFCALLvsEVALSHA measures the reserve script run as a Redis Function (one
// library, FUNCTION LOAD, FCALL) against EVALSHA of the same source, before choosing
// between them. Each reserve holds one unit for a new checkout.
//
//	go test -run '^$' -bench BenchmarkReserveFCALLvsEVALSHA -benchtime 3s ./lua/
func BenchmarkReserveFCALLvsEVALSHA(b *testing.B) {
	rdb := testClient(b)
	ctx := b.Context()
	lib := "#!lua name=checkoutbench\n" + commonLua +
		"redis.register_function('reserve', function(KEYS, ARGV)\n" + source("reserve") + "\nend)\n"
	if err := rdb.FunctionLoadReplace(ctx, lib).Err(); err != nil {
		b.Fatalf("function load: %v", err)
	}
	b.Cleanup(func() { rdb.FunctionDelete(ctx, "checkoutbench") })
	s := New(rdb)
	if err := s.Preload(ctx); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	for _, how := range []string{"evalsha", "fcall"} {
		b.Run(how, func(b *testing.B) {
			sku := testSKU(b, rdb)
			if _, err := s.SetStock(ctx, sku, 1_000_000_000, 1); err != nil {
				b.Fatal(err)
			}
			keys := []string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("c-%d", n.Add(1))
					var vals []int64
					var err error
					if how == "fcall" {
						vals, err = rdb.FCall(ctx, "reserve", keys, id, 1, 0).Int64Slice()
					} else {
						vals, err = reserveScript.EvalSha(ctx, rdb, keys, id, 1, 0).Int64Slice()
					}
					if err != nil || vals[0] != codeOK {
						b.Fatalf("%s reserve: %v %v", how, vals, err)
					}
				}
			})
		})
	}
}

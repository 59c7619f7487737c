package main

import (
	"context"
	"crypto/sha1"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkout-saga/checkout-saga/lua"
)

// Methods of holding a unit of a hot SKU.
const (
	methodDecrby   = "Redis DECRBY (go-redis)"
	methodScript   = "reserve script (go-redis)"
	methodPostgres = "Postgres hot-row UPDATE (pgx)"
)

var holdMethods = []string{methodDecrby, methodScript, methodPostgres}

// holdCell is one method at one concurrency.
type holdCell struct {
	method      string
	concurrency int
	ops         int64
	elapsed     time.Duration
	p50, p99    time.Duration
	lat         latencies // every call's, sorted
}

func (c holdCell) rate() float64 { return float64(c.ops) / c.elapsed.Seconds() }

// sumCells is the cells measured in turns as one: their calls over their windows together.
func sumCells(cells []holdCell) holdCell {
	var sum holdCell
	var lat []time.Duration
	for _, c := range cells {
		sum.method, sum.concurrency = c.method, c.concurrency
		sum.ops += c.ops
		sum.elapsed += c.elapsed
		lat = append(lat, c.lat...)
	}
	sum.lat = newLatencies(lat)
	sum.p50, sum.p99 = sum.lat.pct(50), sum.lat.pct(99)
	return sum
}

// redisBenchResult is redis-benchmark running EVALSHA of the same reserve script.
type redisBenchResult struct {
	ran         bool
	why         string // when it did not run
	command     string
	requests    int
	concurrency int
	rps         float64
	p50, p99    float64 // ms
	holdsMade   int64   // holds the script created: proof that it took the reserve path
}

type holdsResult struct {
	cells []holdCell
	rb    redisBenchResult
}

func (h holdsResult) cell(method string, concurrency int) holdCell {
	for _, c := range h.cells {
		if c.method == method && c.concurrency == concurrency {
			return c
		}
	}
	return holdCell{method: method, concurrency: concurrency, elapsed: 1}
}

func (e *env) benchHolds(ctx context.Context, sz sizes) (holdsResult, error) {
	var h holdsResult
	stock := lua.New(e.rdb)
	if err := stock.Preload(ctx); err != nil {
		return h, err
	}
	pool, err := e.newPool(ctx, 64)
	if err != nil {
		return h, fmt.Errorf("open postgres pool: %w", err)
	}
	defer pool.Close()

	for _, conc := range sz.holdConcurrency {
		// Plain DECRBY on a counter far from zero.
		key := "decr:{" + e.sku(fmt.Sprintf("DECR-%d", conc)) + "}"
		if err := e.rdb.Set(ctx, key, int64(1)<<50, 0).Err(); err != nil {
			return h, err
		}
		c, err := measure(ctx, methodDecrby, conc, sz.holdDuration, func(ctx context.Context, w, i int) error {
			return e.rdb.DecrBy(ctx, key, 1).Err()
		})
		if err != nil {
			return h, err
		}
		h.cells = append(h.cells, c)
		_ = e.rdb.Unlink(ctx, key).Err()

		// The reserve script: a fresh SKU per round (the restock), one new checkout per call.
		sku := e.sku(fmt.Sprintf("HOLD-%d", conc))
		if _, err := stock.SetStock(ctx, sku, 1_000_000_000, 1); err != nil {
			return h, err
		}
		c, err = measure(ctx, methodScript, conc, sz.holdDuration, func(ctx context.Context, w, i int) error {
			_, err := stock.Reserve(ctx, sku, "h"+strconv.Itoa(w)+"-"+strconv.Itoa(i), 1)
			return err
		})
		if err != nil {
			return h, err
		}
		h.cells = append(h.cells, c)
		_ = e.rdb.Unlink(ctx, lua.StockKey(sku), lua.HoldsKey(sku)).Err()

		// The Postgres hot row, autocommit, as the seed's stage 1 does it.
		if _, err := pool.Exec(ctx, `INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ($1, 1000000000, 100, 'usd', 1)`, sku); err != nil {
			return h, fmt.Errorf("insert hot row: %w", err)
		}
		c, err = measure(ctx, methodPostgres, conc, sz.holdDuration, func(ctx context.Context, w, i int) error {
			tag, err := pool.Exec(ctx, `UPDATE skus SET on_hand = on_hand - $1 WHERE sku = $2 AND on_hand >= $1`, int64(1), sku)
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("update of %s changed %d rows", sku, tag.RowsAffected())
			}
			return err
		})
		if err != nil {
			return h, err
		}
		h.cells = append(h.cells, c)
	}
	for _, c := range h.cells {
		progress("   %-32s c=%-3d %9.0f ops/s  p50 %s  p99 %s", c.method, c.concurrency, c.rate(), fmtDur(c.p50), fmtDur(c.p99))
	}

	h.rb, err = e.redisBenchmark(ctx, stock, sz)
	if err != nil {
		return h, fmt.Errorf("redis-benchmark: %w", err)
	}
	if h.rb.ran {
		progress("   redis-benchmark EVALSHA c=%d: %.0f requests/s (%d holds made)", h.rb.concurrency, h.rb.rps, h.rb.holdsMade)
	} else {
		progress("   redis-benchmark not run: %s", h.rb.why)
	}
	return h, nil
}

// measure runs op from conc workers for d (after a short warm-up that opens connections)
// and returns the throughput and per-call latency.
func measure(ctx context.Context, method string, conc int, d time.Duration, op func(ctx context.Context, w, i int) error) (holdCell, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lat     []time.Duration
		ops     atomic.Int64
		stop    atomic.Bool
		failed  atomic.Pointer[error]
		started = make(chan struct{})
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Warm-up call: the connection is dialled outside the timed window.
			if err := op(ctx, w, -1); err != nil {
				failed.CompareAndSwap(nil, &err)
				return
			}
			<-started
			local := make([]time.Duration, 0, 4096)
			for i := 0; !stop.Load(); i++ {
				t := time.Now()
				if err := op(ctx, w, i); err != nil {
					failed.CompareAndSwap(nil, &err)
					break
				}
				local = append(local, time.Since(t))
				ops.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	time.Sleep(200 * time.Millisecond) // let every worker finish its warm-up call
	t0 := time.Now()
	close(started)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	stop.Store(true)
	wg.Wait()
	// Calls in flight when the window closed are counted, so the window lasts until the
	// last of them returned.
	elapsed := time.Since(t0)
	if p := failed.Load(); p != nil {
		return holdCell{}, fmt.Errorf("%s at concurrency %d: %w", method, conc, *p)
	}
	if err := ctx.Err(); err != nil {
		return holdCell{}, err
	}
	ls := newLatencies(lat)
	return holdCell{method: method, concurrency: conc, ops: ops.Load(), elapsed: elapsed, p50: ls.pct(50), p99: ls.pct(99), lat: ls}, nil
}

// redisBenchmark runs redis-benchmark with EVALSHA of the reserve script, each call a new
// checkout: __rand_int__ in the checkout id and in its tombstone key.
func (e *env) redisBenchmark(ctx context.Context, stock *lua.Stock, sz sizes) (redisBenchResult, error) {
	rb := redisBenchResult{requests: sz.redisBenchRequests, concurrency: 64}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		rb.why = "redis-benchmark is not installed (apt-get install redis-tools)"
		return rb, nil
	}
	src := []byte(lua.ScriptSource("reserve"))
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	loaded, err := e.rdb.ScriptLoad(ctx, string(src)).Result()
	if err != nil {
		return rb, fmt.Errorf("script load: %w", err)
	}
	if loaded != sha {
		return rb, fmt.Errorf("script load returned %s, want %s", loaded, sha)
	}
	sku := e.sku("RB")
	if _, err := stock.SetStock(ctx, sku, 1_000_000_000, 1); err != nil {
		return rb, err
	}
	defer e.rdb.Unlink(context.Background(), lua.StockKey(sku), lua.HoldsKey(sku))

	opts := e.rdb.Options()
	host, port, _ := strings.Cut(opts.Addr, ":")
	args := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(opts.DB),
		"-n", strconv.Itoa(rb.requests), "-c", strconv.Itoa(rb.concurrency), "-r", "1000000000", "--csv",
		"EVALSHA", sha, "3", lua.StockKey(sku), lua.HoldsKey(sku), lua.HoldEndsKey(sku), "rb__rand_int__", "1", "0"}
	if opts.Password != "" {
		args = append([]string{"-a", opts.Password}, args...)
	}
	rb.command = "redis-benchmark " + strings.Join(args, " ")
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, args...).Output()
	if err != nil {
		return rb, fmt.Errorf("%s: %w", rb.command, err)
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 7 {
		return rb, fmt.Errorf("unexpected redis-benchmark output %q", out)
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	rb.rps, _ = strconv.ParseFloat(rows[1][1], 64)
	rb.p50, _ = strconv.ParseFloat(rows[1][4], 64)
	rb.p99, _ = strconv.ParseFloat(rows[1][6], 64)
	rb.holdsMade, err = e.rdb.HLen(ctx, lua.HoldsKey(sku)).Result()
	if err != nil {
		return rb, err
	}
	// Random ids can repeat (ALREADY_HELD, the same cost); anything far below the request
	// count means the script failed instead of holding.
	if rb.holdsMade < int64(rb.requests)*9/10 {
		return rb, fmt.Errorf("redis-benchmark made only %d holds for %d requests: the script is failing", rb.holdsMade, rb.requests)
	}
	rb.ran = true
	return rb, nil
}

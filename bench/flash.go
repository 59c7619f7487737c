package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// flashResult is the seed's flash sale scaled to this machine: a burst of carts for one SKU,
// every winner paying at once.
type flashResult struct {
	sku                                string
	units, requests, concurrency       int
	held                               int            // 201 answers
	rejected                           int            // 409 answers
	heldOnRetry                        int            // of held: learnt as 200 on a retry of a timed-out POST
	shed                               int            // 503 answers, each retried after Retry-After
	gaveUp                             int            // still 503 after every retry
	errors                             int            // transport errors and any other status
	fiveXX                             int            // answers >= 500 other than admission control's 503 overloaded
	answers                            map[string]int // every attempt's status (and problem code)
	orphanHolds, orphanUnits           int            // held by sagas whose clients gave up: cancelled
	sold, orderLines                   int64          // Postgres: skus.sold and the order lines
	oversold                           int64
	availableAtEnd, heldAtEnd, onHand  int64
	paymentErrors                      int
	sellOut, allAnswered, allConfirmed time.Duration // since the burst started
	rejectLatency, holdLatency         latencies
	// The buyer's wait: from the first POST to the final answer (201, or the 202 followed
	// until the cart left the waiting room, or 409), retries and queueing included.
	buyerWait, postLatency latencies
	// byFirstAnswer is each POST's latency by its first answer (201, 202, 409, ...): the
	// POST p99 mixes the carts that passed, those queued in the burst and the later refusals.
	byFirstAnswer     map[int]latencies
	queued            int           // carts answered 202 (the waiting room)
	overtaken         int           // pairs where a buyer 200 ms later holds what an earlier one was refused
	loserAfterSellOut time.Duration // the last loser's answer after the last unit was held
	cpu               cpuSnapshot
	// Timelines for the chart, in seconds since the burst started.
	heldAt, rejectedAt, confirmedAt []float64
	outOfStockHistory               int // history events of a checkout the saga refused, 0 if none
	// outOfStockSagas counts the checkouts a saga ended out of stock: the carts the door let
	// in (or took from the line) that the reserve script refused.
	outOfStockSagas int
}

func (s *stack) benchFlashSale(ctx context.Context, sz sizes) (flashResult, error) {
	r := flashResult{sku: s.sku("FLASH"), units: sz.flashUnits, requests: sz.flashRequests, concurrency: sz.flashConcurrency}
	if err := s.setStock(ctx, r.sku, int64(r.units), 1); err != nil {
		return r, err
	}
	prefix := "f-" + s.runID + "-"

	// Winners pay as soon as they hold, from a bounded pool of payers (the webhook sender).
	winners := make(chan postResult, r.requests)
	var payWG sync.WaitGroup
	var payMu sync.Mutex
	for range 32 {
		payWG.Add(1)
		go func() {
			defer payWG.Done()
			for w := range winners {
				if err := s.pay(ctx, w.view.CheckoutID, w.view.AmountCents); err != nil {
					payMu.Lock()
					r.paymentErrors++
					payMu.Unlock()
					progress("   %v", err)
				}
			}
		}()
	}

	before := s.cpu(ctx)
	t0 := time.Now()
	results := make([]postResult, r.requests)
	_, err := pool(ctx, r.requests, r.concurrency, func(i int) error {
		p := s.postCheckout(ctx, fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("u-%s-%d", s.runID, i), r.sku, sz.flashRetries)
		results[i] = p
		if won(p) {
			winners <- p
		}
		return nil // every answer is counted below, none stops the crowd
	})
	close(winners)
	if err != nil {
		return r, err
	}
	r.allAnswered = time.Since(t0)
	r.answers = map[string]int{}
	winnerIDs := map[string]bool{}
	var rejectLat, holdLat, waits, posts []time.Duration
	byAnswer := map[int][]time.Duration{} // POST latencies by the first answer: 201, 202, 409
	var lastLoser time.Time
	for i, p := range results {
		if p.err == nil {
			waits = append(waits, p.answered.Sub(p.sent))
			posts = append(posts, p.latency)
			first := p.code
			if p.queued {
				first = http.StatusAccepted
			}
			byAnswer[first] = append(byAnswer[first], p.latency)
		}
		if p.queued {
			r.queued++
		}
		for _, a := range p.attempts {
			r.answers[a]++
			if strings.HasPrefix(a, "5") && a != "503 overloaded" {
				r.fiveXX++
			}
		}
		r.shed += p.shed
		at := p.answered.Sub(t0).Seconds()
		switch {
		case p.err != nil:
			r.errors++
		case won(p):
			r.held++
			if p.code == http.StatusOK && !p.queued {
				r.heldOnRetry++
			}
			winnerIDs[fmt.Sprintf("%s%d", prefix, i)] = true
			holdLat = append(holdLat, p.latency)
			r.heldAt = append(r.heldAt, at)
			r.sellOut = max(r.sellOut, p.answered.Sub(t0))
		case p.code == http.StatusConflict, p.code == http.StatusOK && p.view.Status == shop.StatusOutOfStock:
			r.rejected++
			rejectLat = append(rejectLat, p.latency)
			if p.answered.After(lastLoser) {
				lastLoser = p.answered
			}
			r.rejectedAt = append(r.rejectedAt, at)
		case p.code == http.StatusServiceUnavailable:
			r.gaveUp++
		default:
			r.errors++
		}
	}
	r.rejectLatency, r.holdLatency = newLatencies(rejectLat), newLatencies(holdLat)
	r.buyerWait, r.postLatency = newLatencies(waits), newLatencies(posts)
	r.overtaken = overtaken(results, 200*time.Millisecond)
	if !lastLoser.IsZero() {
		r.loserAfterSellOut = max(0, lastLoser.Sub(t0)-r.sellOut)
	}
	progress("   buyers: wait p50 %s p99 %s max %s; POST answered p99 %s; %d waited in the room; %d overtaken; last loser %s after sell-out",
		fmtDur(r.buyerWait.pct(50)), fmtDur(r.buyerWait.pct(99)), fmtDur(r.buyerWait.pct(100)), fmtDur(r.postLatency.pct(99)),
		r.queued, r.overtaken, fmtDur(r.loserAfterSellOut))
	r.byFirstAnswer = map[int]latencies{}
	for code, l := range byAnswer {
		r.byFirstAnswer[code] = newLatencies(l)
	}
	progress("   POST latency by first answer: %s", r.firstAnswers())
	progress("   burst answered in %s: %d held (%d of them learnt on a retry), %d rejected, %d gave up after %d retries, %d errors; answers %v",
		r.allAnswered.Round(time.Millisecond), r.held, r.heldOnRetry, r.rejected, r.gaveUp, sz.flashRetries, r.errors, r.answers)

	payWG.Wait()
	// Wait until every winner's order is in Postgres and every hold is committed in Redis. A
	// saga whose client gave up (its update timed out, then every retry was shed) may still
	// hold units its client never learnt about: such a buyer cannot pay, so the hold is
	// cancelled (as its payment timer would, minutes later) and counted.
	cancelled := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var orders int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE checkout_id LIKE $1`, prefix+"%").Scan(&orders); err != nil {
			return r, err
		}
		holders, err := s.rdb.HGetAll(ctx, lua.HoldsKey(r.sku)).Result()
		if err != nil {
			return r, err
		}
		for id, q := range holders {
			if winnerIDs[id] || cancelled[id] {
				continue
			}
			cancelled[id] = true
			n, _ := strconv.Atoi(q)
			r.orphanHolds++
			r.orphanUnits += n
			if a, err := do(ctx, s.http, http.MethodPost, s.url+"/v1/checkouts/"+id+"/cancel", nil, checkouttest.BuyerOf(id), nil); err != nil || a.code != http.StatusOK {
				progress("   cancel orphan hold of %s: %d %v", id, a.code, err)
			}
		}
		if orders >= r.held && len(holders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			progress("   not settled within 3 minutes: %d orders for %d winners, %d checkouts still hold units", orders, r.held, len(holders))
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	if r.orphanHolds > 0 {
		progress("   %d checkouts held %d units their clients never learnt about (cancelled)", r.orphanHolds, r.orphanUnits)
	}
	r.cpu = s.cpu(ctx).sub(before)

	rows, err := s.pool.Query(ctx, `SELECT extract(epoch FROM created_at)::float8 FROM orders WHERE checkout_id LIKE $1`, prefix+"%")
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var epoch float64
		if err := rows.Scan(&epoch); err != nil {
			rows.Close()
			return r, err
		}
		r.confirmedAt = append(r.confirmedAt, epoch-float64(t0.UnixNano())/1e9)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, err
	}
	sort.Float64s(r.confirmedAt)
	sort.Float64s(r.heldAt)
	sort.Float64s(r.rejectedAt)
	if n := len(r.confirmedAt); n > 0 {
		r.allConfirmed = time.Duration(r.confirmedAt[n-1] * float64(time.Second))
	}

	view, err := s.inv.Get(ctx, r.sku)
	if err != nil {
		return r, err
	}
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_lines WHERE sku = $1`, r.sku).Scan(&r.orderLines); err != nil {
		return r, err
	}
	r.sold, r.onHand, r.availableAtEnd, r.heldAtEnd = view.Sold, view.OnHand, view.Available, view.Held
	r.oversold = max(0, max(r.sold, r.orderLines, int64(r.held))-int64(r.units))
	if r.availableAtEnd < 0 {
		r.oversold = max(r.oversold, -r.availableAtEnd)
	}

	// The cost of a checkout the saga itself refused (out_of_stock after the gate let it in),
	// if any: the requests that raced the last units.
	for i, p := range results {
		if p.err == nil && p.code == http.StatusConflict {
			if n, err := s.historyLength(ctx, shop.WorkflowID(fmt.Sprintf("%s%d", prefix, i))); err == nil && n > 0 {
				r.outOfStockHistory = n
				break
			}
		}
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM checkouts WHERE checkout_id LIKE $1 AND status = 'out_of_stock'
		AND coalesce(reason, '') NOT LIKE '%waiting room%'`, prefix+"%").Scan(&r.outOfStockSagas); err != nil {
		return r, err
	}
	progress("   sold %d of %d (order lines %d, oversold %d) in %s to sell out, all confirmed after %s; %d sagas ended out of stock; CPU: bench process %.1f s, dev server %.1f s, redis %.1f s",
		r.sold, r.units, r.orderLines, r.oversold, r.sellOut.Round(time.Millisecond), r.allConfirmed.Round(time.Millisecond),
		r.outOfStockSagas, r.cpu.self.Seconds(), r.cpu.devServer.Seconds(), r.cpu.redis.Seconds())
	return r, nil
}

// firstAnswers is the POST latency by first answer, as "202: 985, p50 70 ms, p99 480 ms; ...".
func (r flashResult) firstAnswers() string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(r.byFirstAnswer)) {
		l := r.byFirstAnswer[code]
		parts = append(parts, fmt.Sprintf("%d: %d, p50 %s, p99 %s, max %s", code, len(l), fmtDur(l.pct(50)), fmtDur(l.pct(99)), fmtDur(l.pct(100))))
	}
	return strings.Join(parts, "; ")
}

// overtaken counts the pairs of buyers where the later one, by more than gap, holds a unit
// the earlier one was refused: first come, first served, broken.
func overtaken(results []postResult, gap time.Duration) int {
	var refused, held []time.Time
	for _, p := range results {
		switch {
		case won(p):
			held = append(held, p.sent)
		case p.err == nil && (p.code == http.StatusConflict || p.view.Status == shop.StatusOutOfStock):
			refused = append(refused, p.sent)
		}
	}
	n := 0
	for _, early := range refused {
		for _, late := range held {
			if late.Sub(early) > gap {
				n++
			}
		}
	}
	return n
}

// won reports whether a POST ended holding stock: 201, or 200 when a retry attached to the
// saga a timed-out attempt had started.
func won(p postResult) bool {
	return p.err == nil && (p.code == http.StatusCreated || p.code == http.StatusOK) && p.view.Status == shop.StatusAwaitingPayment
}

// gateResult compares the sold-out gate's 409s with a bare Echo handler over the same client,
// and the sold-out path with the product's rate limiter on with the same path with it off.
type gateResult struct {
	concurrency int
	bare        holdCell // ops counts only the expected answers (200, 409)
	// soldOut is the sold-out path without rate limits, limited the same path with the
	// product's limits on (set so high that none refuses): two API replicas of one product,
	// alike but for the limiter, measured in turns.
	soldOut, limited                 holdCell
	soldOutUnexpect, limitedUnexpect int64 // answers other than 409 (must be 0 once stock is gone)
	// bareCPU, soldOutCPU and limitedCPU are the CPU each side used over its turns (this
	// process holds the load generator, the bare handler, both replicas and the worker).
	bareCPU, soldOutCPU, limitedCPU cpuSnapshot
	workflowsStarted                int64 // checkouts of the gate phase that reached a saga (must be 0)
}

func (g gateResult) bareRate() float64    { return g.bare.rate() }
func (g gateResult) soldOutRate() float64 { return g.soldOut.rate() }
func (g gateResult) limitedRate() float64 { return g.limited.rate() }

// productLimits are the product's three rate limits (cmd/checkout wires them: per address a
// second with a burst of twice the rate, checkouts per address and per customer a minute),
// each at the configuration's highest value (1,000,000): every request of the benchmark comes
// from one address (the gate's from one customer too), and none may be refused, so the
// limiter costs its Redis calls and changes no answer. A POST counts on two of them
// (checkouts per address and per customer), a GET on the first. The stack's product (phase
// 3's checkouts, the flash sale, the drop) runs with them, as the binary does; phase 5
// compares a replica with them against one without.
func productLimits(rdb *redis.Client) *api.RateLimits {
	const n = 1_000_000
	return &api.RateLimits{Limiter: lua.NewRateLimiter(lua.NewCoalescedScripts(rdb)), // as cmd/checkout wires it
		PerAddress:          shop.RateLimit{Rate: n, Burst: 2 * n, Period: time.Second},
		CheckoutsPerAddress: shop.RateLimit{Rate: n, Burst: n, Period: time.Minute},
		PerCustomer:         shop.RateLimit{Rate: n, Burst: n, Period: time.Minute}}
}

// gateTurns is how many times each side of phase 5 (the bare handler, the sold-out path with
// the limiter off, then on) is measured, each for a share of sizes.gateDuration, in the order
// bare, off, on, on, off, bare, ...: a load that grows or shrinks during the phase weighs on
// every side alike, and outside load that comes and goes (the machine is shared) is spread
// over all. Measured one after the other, at load average 6 the same build's ratio of on to
// off moved from 0.67 to 1.02 between runs, and a bare handler measured first once ran
// slower than the sold-out path after it.
const gateTurns = 4

func (s *stack) benchGate(ctx context.Context, sz sizes) (gateResult, error) {
	g := gateResult{concurrency: sz.gateConcurrency}
	// A SKU with no unit left, as the flash-sale SKU is once sold out; its own, so the
	// figure does not depend on how the flash sale ended.
	sku := s.sku("SOLDOUT")
	if err := s.setStock(ctx, sku, 0, 1); err != nil {
		return g, err
	}

	// A bare Echo handler: a small JSON answer to the same POST, over the same client.
	bare := echo.New()
	bare.HideBanner, bare.HidePort = true, true
	bare.POST("/bare", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	srv := httptest.NewServer(bare)
	defer srv.Close()
	body := []byte(`{"cart_id":"bare","customer_id":"u-bare","items":[{"sku":"` + sku + `","quantity":1}],"payment_timeout_seconds":600}`)
	bareOp := func(ctx context.Context, w, i int) error {
		a, err := do(ctx, s.http, http.MethodPost, srv.URL+"/bare", body, nil, nil)
		if err == nil && a.code != http.StatusOK {
			err = fmt.Errorf("bare handler answered %d", a.code)
		}
		return err
	}

	// Two replicas of the product as it runs (the sold-out flag, a waiting room they share
	// and take from), one without rate limits, one with the product's limits set high.
	// Every key of the room carries the run id, so the run's clean-up removes them.
	room := lua.NewRoom(s.rdb, "bench-gate-"+s.runID)
	off := s.product.ServeAPIWith(api.Config{}, s.tc, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true})
	on := s.product.ServeAPIWith(api.Config{}, s.tc, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true, RateLimits: productLimits(s.rdb)})

	// New carts for the sold-out SKU, each answered 409 without a saga.
	var mu sync.Mutex
	soldOut := func(side, url string, unexpected *int64) func(ctx context.Context, w, i int) error {
		return func(ctx context.Context, w, i int) error {
			cart := fmt.Sprintf("g-%s-%s-%d-%d", s.runID, side, w, i)
			body := []byte(`{"cart_id":"` + cart + `","customer_id":"u-gate-` + s.runID + `","items":[{"sku":"` + sku + `","quantity":1}],"payment_timeout_seconds":600}`)
			a, err := do(ctx, s.http, http.MethodPost, url+"/v1/checkouts", body, nil, nil)
			if err != nil {
				return err
			}
			if a.code != http.StatusConflict {
				mu.Lock()
				*unexpected++
				mu.Unlock()
			}
			return nil
		}
	}

	// The three sides in turns: bare, off, on, then on, off, bare, and again.
	type side struct {
		name  string
		op    func(k int) func(ctx context.Context, w, i int) error
		turns []holdCell
		cpu   *cpuSnapshot
	}
	sides := []*side{
		{name: "bare Echo handler", op: func(int) func(context.Context, int, int) error { return bareOp }, cpu: &g.bareCPU},
		{name: "sold-out gate, limiter off", op: func(k int) func(context.Context, int, int) error {
			return soldOut(fmt.Sprintf("off%d", k), off, &g.soldOutUnexpect)
		}, cpu: &g.soldOutCPU},
		{name: "sold-out gate, limiter on", op: func(k int) func(context.Context, int, int) error {
			return soldOut(fmt.Sprintf("on%d", k), on, &g.limitedUnexpect)
		}, cpu: &g.limitedCPU},
	}
	turn := sz.gateDuration / gateTurns
	for k := range gateTurns {
		order := slices.Clone(sides)
		if k%2 == 1 {
			slices.Reverse(order)
		}
		for _, sd := range order {
			before := s.cpu(ctx)
			c, err := measure(ctx, sd.name, g.concurrency, turn, sd.op(k))
			if err != nil {
				return g, err
			}
			sd.turns = append(sd.turns, c)
			*sd.cpu = sd.cpu.add(s.cpu(ctx).sub(before))
		}
	}
	g.bare, g.soldOut, g.limited = sumCells(sides[0].turns), sumCells(sides[1].turns), sumCells(sides[2].turns)
	g.soldOut.ops -= g.soldOutUnexpect
	g.limited.ops -= g.limitedUnexpect

	// No gate request may have become a saga: the gate only reads Redis.
	var started int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM checkouts WHERE checkout_id LIKE $1`, "g-"+s.runID+"-%").Scan(&started); err != nil {
		return g, err
	}
	g.workflowsStarted = started
	progress("   CPU ms per 1,000 answers, bare: %s; limiter off: %s; on: %s", g.cpuPerK(g.bareCPU, g.bare), g.cpuPerK(g.soldOutCPU, g.soldOut), g.cpuPerK(g.limitedCPU, g.limited))
	progress("   bare Echo: %.0f req/s (p50 %s p99 %s); sold-out 409s, limiter off: %.0f/s (p50 %s p99 %s), on: %.0f/s (p50 %s p99 %s), %.2f x; %d and %d other answers, %d reached a saga",
		g.bareRate(), fmtDur(g.bare.p50), fmtDur(g.bare.p99), g.soldOutRate(), fmtDur(g.soldOut.p50), fmtDur(g.soldOut.p99),
		g.limitedRate(), fmtDur(g.limited.p50), fmtDur(g.limited.p99), ratio(g.limitedRate(), g.soldOutRate()),
		g.soldOutUnexpect, g.limitedUnexpect, g.workflowsStarted)
	return g, nil
}

// cpuPerK is one side's CPU per 1,000 answers, by process.
func (g gateResult) cpuPerK(c cpuSnapshot, cell holdCell) string {
	k := float64(max(cell.ops, 1)) / 1000
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / k }
	return fmt.Sprintf("this process %.0f, Redis %.0f, Postgres %.0f, dev server %.0f", ms(c.self), ms(c.redis), ms(c.postgres), ms(c.devServer))
}

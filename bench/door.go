// The door alone: a sale's opening burst answered with no saga behind it.

package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/lua"
)

// doorRounds is how many bursts -door-only sends, one after the other.
const doorRounds = 3

// benchDoor measures the door alone: the work a sale's opening burst asks of the API before
// any saga starts. A replica of the product as it runs (the sold-out flag, the product's rate
// limits set high, Postgres's key claims) has a waiting room of its own that an operator
// holds: new carts still queue, none leaves, so no saga starts. Each round, as many clients
// as the flash sale has send one POST of a new cart each, all at once, and each is answered
// 202 queued. What the flash sale's 202s take beyond these figures is the sagas' share of
// the cores. With warm, the clients open their connections first (a GET each, all at once),
// as buyers who wait on the shop's page before a drop would have theirs open: the first
// burst then pays no connection set-up, which the flash sale's first burst does.
func (s *stack) benchDoor(ctx context.Context, sz sizes, warm bool) error {
	sku := s.sku("DOOR")
	if err := s.setStock(ctx, sku, 1_000_000, 1); err != nil {
		return err
	}
	// Every key of the room carries the run id, so the run's clean-up removes them.
	room := lua.NewRoom(s.rdb, "bench-door-"+s.runID)
	url := s.product.ServeAPIWith(api.Config{}, s.tc, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true, RateLimits: productLimits(s.rdb)})
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	if a, err := do(ctx, s.http, http.MethodPost, url+"/v1/admin/waiting-room/hold", nil, admin, nil); err != nil || a.code != http.StatusOK {
		return fmt.Errorf("hold the door's room: %d %v", a.code, err)
	}
	n := sz.flashConcurrency
	if warm {
		if _, err := pool(ctx, n, n, func(int) error {
			_, err := do(ctx, s.http, http.MethodGet, url+"/healthz", nil, nil, nil)
			return err
		}); err != nil {
			return err
		}
	}
	for round := range doorRounds {
		lat := make([]time.Duration, n)
		var mu sync.Mutex
		answers := map[int]int{}
		before := s.cpu(ctx)
		t0 := time.Now()
		_, err := pool(ctx, n, n, func(i int) error {
			cart := fmt.Sprintf("d-%s-%d-%d", s.runID, round, i)
			body := []byte(`{"cart_id":"` + cart + `","customer_id":"u-` + cart + `","items":[{"sku":"` + sku + `","quantity":1}],"payment_timeout_seconds":600}`)
			sent := time.Now()
			a, err := do(ctx, s.http, http.MethodPost, url+"/v1/checkouts", body, nil, nil)
			lat[i] = time.Since(sent)
			mu.Lock()
			answers[a.code]++
			mu.Unlock()
			return err
		})
		if err != nil {
			return err
		}
		all := time.Since(t0)
		cpu := s.cpu(ctx).sub(before)
		l := newLatencies(lat)
		perPost := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
		progress("   door, round %d: %d POSTs at once, answers %v, all answered in %s; POST p50 %s, p99 %s, max %s; CPU ms per POST: this process %.2f, Redis %.2f, Postgres %.2f, dev server %.2f",
			round+1, n, answers, fmtDur(all), fmtDur(l.pct(50)), fmtDur(l.pct(99)), fmtDur(l.pct(100)),
			perPost(cpu.self), perPost(cpu.redis), perPost(cpu.postgres), perPost(cpu.devServer))
	}
	return nil
}

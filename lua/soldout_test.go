package lua

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// flagOn returns a SoldOutFlag on s whose clock the test moves, and that clock.
func flagOn(s *Stock) (*SoldOutFlag, *time.Time) {
	f := NewSoldOutFlag(s, 100*time.Millisecond)
	now := time.Now()
	f.now = func() time.Time { return now }
	return f, &now
}

// flaggedSoldOut stocks one unit, lets holder hold it, and lets a first loser find the SKU
// sold out through a flag, from Redis.
func flaggedSoldOut(t *testing.T, holder string) (*Stock, *redis.Client, string, *SoldOutFlag, *time.Time) {
	t.Helper()
	s, rdb, sku := stocked(t, 1, 1)
	f, now := flagOn(s)
	if _, err := s.Reserve(t.Context(), sku, holder, 1); err != nil {
		t.Fatal(err)
	}
	if p, err := f.Precheck(t.Context(), "c-loser-1", map[string]int64{sku: 1}); err != nil || !p.SoldOut() {
		t.Fatalf("first loser = %+v, %v; want sold out (from Redis)", p, err)
	}
	return s, rdb, sku, f, now
}

// TestSoldOutFlagAnswersLosersFromMemory: once Redis showed the SKU sold out, the next
// losers are refused without a Redis command, with the shortage Redis showed.
func TestSoldOutFlagAnswersLosersFromMemory(t *testing.T) {
	_, rdb, sku, f, _ := flaggedSoldOut(t, "c-winner")
	ctx := t.Context()
	log := &commandLog{}
	rdb.AddHook(log)
	p, err := f.Precheck(ctx, "c-loser-2", map[string]int64{sku: 1})
	if err != nil || !p.SoldOut() || len(p.Shortages) != 1 || p.Shortages[0] != (shop.Shortage{SKU: sku, Requested: 1, Available: 0}) {
		t.Fatalf("second loser = %+v, %v; want sold out, 1 requested 0 available", p, err)
	}
	if got := log.commands(); len(got) != 0 {
		t.Errorf("the second loser cost Redis commands %v; want none", got)
	}
}

// TestSoldOutFlagNeverRefusesACheckoutThatHoldsOrHeld: a retry of a checkout that holds the
// sold-out SKU, whose hold ended, or that started through this process reaches its saga.
func TestSoldOutFlagNeverRefusesACheckoutThatHoldsOrHeld(t *testing.T) {
	s, _, sku := stocked(t, 2, 1)
	ctx := t.Context()
	f, _ := flagOn(s)
	for _, id := range []string{"c-holder", "c-paid"} {
		if _, err := s.Reserve(ctx, sku, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Commit(ctx, sku, "c-paid"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, sku, "c-gave-up"); err != nil { // a saga that never got a hold
		t.Fatal(err)
	}
	if err := f.MarkStarted(ctx, "c-started-here"); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.Precheck(ctx, "c-loser", map[string]int64{sku: 1}); !p.SoldOut() {
		t.Fatalf("loser = %+v; want sold out", p)
	}
	if p, _ := f.Precheck(ctx, "c-loser", map[string]int64{sku: 1}); !p.SoldOut() {
		t.Fatalf("loser again (flagged) = %+v; want sold out", p)
	}
	for _, id := range []string{"c-holder", "c-paid", "c-gave-up", "c-started-here"} {
		p, err := f.Precheck(ctx, id, map[string]int64{sku: 1})
		if err != nil || p.SoldOut() {
			t.Errorf("retry of %s while flagged = %+v, %v; want it let through", id, p, err)
		}
	}
}

// TestSoldOutFlagIsStaleAtMostTheBound: when stock comes back, the flag may refuse for less
// than its bound; from the bound on, Redis decides again. It never lets a cart through that
// Redis would refuse: the flag only refuses.
func TestSoldOutFlagIsStaleAtMostTheBound(t *testing.T) {
	s, rdb, sku, f, now := flaggedSoldOut(t, "c-holder")
	ctx := t.Context()
	if _, err := s.Release(ctx, sku, "c-holder"); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(99 * time.Millisecond)
	if p, _ := f.Precheck(ctx, "c-2", map[string]int64{sku: 1}); !p.SoldOut() {
		t.Fatalf("within the bound: %+v; the flag was expected to answer (stale)", p)
	}
	*now = now.Add(time.Millisecond)
	log := &commandLog{}
	rdb.AddHook(log)
	if p, err := f.Precheck(ctx, "c-2", map[string]int64{sku: 1}); err != nil || p.SoldOut() {
		t.Fatalf("at the bound = %+v, %v; want Redis to answer: 1 available", p, err)
	}
	// A cart let through is always Redis's answer (and then the reserve script's): the flag
	// only refuses.
	if len(log.commands()) == 0 {
		t.Errorf("the flag let a cart through without asking Redis")
	}
}

// BenchmarkSoldOutAnswers compares sold-out POSTs answered through the flag with a bare Echo
// handler answering a small JSON, and with the gate reading Redis (Stock.Precheck), over
// loopback HTTP with 64 concurrent clients; the gated handlers decode the body. The ratio
// of sold-out answers to the bare handler's is bare ns/op over flag ns/op.
//
//	go test -run '^$' -bench BenchmarkSoldOutAnswers -benchtime 2s ./lua/
func BenchmarkSoldOutAnswers(b *testing.B) {
	rdb := testClient(b)
	sku := testSKU(b, rdb)
	s := New(rdb)
	if _, err := s.SetStock(b.Context(), sku, 0, 1); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"cart_id":"c-bench","customer_id":"u-1","items":[{"sku":"` + sku + `","quantity":1}]}`)
	type cart struct {
		CartID string `json:"cart_id"`
		Items  []struct {
			SKU      string `json:"sku"`
			Quantity int64  `json:"quantity"`
		} `json:"items"`
	}
	gated := func(g interface {
		Precheck(ctx context.Context, id string, items map[string]int64) (shop.Precheck, error)
	}) echo.HandlerFunc {
		return func(c echo.Context) error {
			var req cart
			if err := json.NewDecoder(c.Request().Body).Decode(&req); err != nil {
				return err
			}
			items := map[string]int64{}
			for _, it := range req.Items {
				items[it.SKU] = it.Quantity
			}
			p, err := g.Precheck(c.Request().Context(), req.CartID, items)
			if err != nil || !p.SoldOut() {
				b.Fatalf("not sold out: %+v %v", p, err)
			}
			return c.JSON(http.StatusConflict, map[string]any{"code": "out_of_stock", "shortages": p.Shortages})
		}
	}
	bare := func(c echo.Context) error {
		return c.JSON(http.StatusConflict, map[string]any{"code": "out_of_stock"})
	}
	for _, h := range []struct {
		name    string
		handler echo.HandlerFunc
	}{{"bare", bare}, {"flag", gated(NewSoldOutFlag(s, 0))}, {"redis", gated(s)}} {
		b.Run(h.name, func(b *testing.B) {
			e := echo.New()
			e.HideBanner = true
			e.POST("/v1/checkouts", h.handler)
			srv := httptest.NewServer(e)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.SetParallelism(32) // 64 clients on this machine's 2 cores, as the bench's gate step
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(srv.URL+"/v1/checkouts", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusConflict {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		})
	}
}

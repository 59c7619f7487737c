// Package e2e runs the product end to end: a real Temporal dev server started from the
// pinned CLI build on free ports, the worker and the HTTP API in this test binary, real
// Redis and a fresh Postgres database.
//
// Every test starts a product of its own (checkouttest.Start: its own dev server and
// database, its own SKUs in Redis), so the tests share nothing and run in parallel: most of
// their time is spent waiting on timers, retries and the dev server, not on the CPU.
package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// waitFinal polls a checkout, as its buyer (with its secret), until it reaches an end state.
func waitFinal(t *testing.T, p *checkouttest.Product, checkoutID, secret string) api.CheckoutView {
	var v api.CheckoutView
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v = api.CheckoutView{}
		a, err := p.Client.Do(t.Context(), http.MethodGet, "/v1/checkouts/"+checkoutID, nil, checkouttest.Buyer(secret), &v)
		require.NoError(c, err)
		require.Equal(c, http.StatusOK, a.Code)
		assert.True(c, v.Status.Final(), "checkout %s is %s", checkoutID, v.Status)
	}, 90*time.Second, 100*time.Millisecond)
	return v
}

type role int

const (
	rolePay role = iota
	roleExpire
	roleCancel
	rolePayTwice // the webhook is delivered twice, as providers do
)

// timeout is the payment window a cart of this role asks for: 2 s for those left to expire
// (the dev server fires timers on a one-second grain), ten minutes for the rest.
func (r role) timeout() int64 {
	if r == roleExpire {
		return 2
	}
	return 600
}

func (r role) String() string { return [...]string{"pay", "expire", "cancel", "pay-twice"}[r] }

type cart struct {
	id       string
	role     role
	items    []api.RequestItem
	code     int
	view     api.CheckoutView
	final    api.CheckoutView
	requests []int // every status code this cart's requests got
}

// TestFlashSaleSellsExactlyTheStockOverHTTP sells 50 units of two SKUs to 200 concurrent carts over HTTP. Winners are
// paid by signed webhooks (some delivered twice), left to expire on a 2 s timer, or
// cancelled. Afterwards nothing may be oversold, every paid checkout must be confirmed in
// Postgres, every other checkout's holds released, and available + held == on_hand.
func TestFlashSaleSellsExactlyTheStockOverHTTP(t *testing.T) {
	t.Parallel()
	p := checkouttest.Start(t, checkouttest.Options{})
	ctx := t.Context()
	run := testenv.RandomID("")
	phone, cover := "PHONE-"+run, "COVER-"+run
	const phoneUnits, coverUnits = 50, 20
	if err := p.SetStock(ctx, phone, phoneUnits, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.SetStock(ctx, cover, coverUnits, 2); err != nil {
		t.Fatal(err)
	}

	const carts = 200
	all := make([]*cart, carts)
	for i := range all {
		c := &cart{id: fmt.Sprintf("c-%s-%03d", run, i), role: role(i % 4)}
		c.items = []api.RequestItem{{SKU: phone, Quantity: int64(1 + i%2)}}
		if i%5 == 0 {
			c.items = append(c.items, api.RequestItem{SKU: cover, Quantity: 1})
		}
		all[i] = c
	}

	started := time.Now()
	var wg sync.WaitGroup
	var shed atomic.Int32
	for _, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The client retries a 503 (admission control shedding the burst) after its
			// Retry-After, as a well-behaved client does; the same cart id makes it safe.
			// A cart that waits in the waiting room (202) is followed until it leaves it.
			a, err := p.Client.Checkout(ctx, api.CheckoutRequest{CartID: c.id, CustomerID: "u-" + run,
				Items: c.items, PaymentTimeoutSeconds: new(c.role.timeout())}, nil, &c.view)
			if err != nil {
				t.Errorf("POST checkout %s: %v", c.id, err)
			}
			c.code = a.Code
			shed.Add(int32(a.Retried))
			c.requests = append(c.requests, c.code)
		}()
	}
	wg.Wait()
	burst := time.Since(started)

	var winners []*cart
	var rejected int
	for _, c := range all {
		switch c.code {
		case http.StatusOK:
			if c.view.Status == shop.StatusOutOfStock { // left the waiting room for a saga that refused it
				rejected++
				continue
			}
			// 200: the cart left the waiting room holding, or an earlier attempt timed out
			// (503) after its saga started and the retry attached to that saga.
			fallthrough
		case http.StatusCreated:
			if c.view.Status != shop.StatusAwaitingPayment {
				t.Errorf("cart %s: 201 with status %s", c.id, c.view.Status)
			}
			winners = append(winners, c)
		case http.StatusConflict:
			rejected++
		default:
			t.Errorf("cart %s: POST answered %d", c.id, c.code)
		}
	}
	if len(winners) == 0 {
		t.Fatal("no cart won any stock")
	}

	// A retried POST of a winner attaches to its saga: 200, never a second saga.
	retry := winners[0]
	var again api.CheckoutView
	a, err := p.Client.Do(ctx, http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: retry.id, CustomerID: "u-" + run,
		Items: retry.items, PaymentTimeoutSeconds: new(retry.role.timeout())}, nil, &again)
	if err != nil || a.Code != http.StatusOK || again.WorkflowID != retry.view.WorkflowID {
		t.Errorf("retried POST of %s: %d %v %+v; want 200 with the same saga", retry.id, a.Code, err, again)
	}
	if again.CheckoutSecret == "" || again.CheckoutSecret != retry.view.CheckoutSecret {
		t.Errorf("retried POST of %s: checkout_secret %q, want the first answer's %q", retry.id, again.CheckoutSecret, retry.view.CheckoutSecret)
	}

	// Act on every winner concurrently: pay, cancel, or let expire.
	for _, c := range winners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch c.role {
			case rolePay:
				err = p.Client.Pay(ctx, c.id, c.view.AmountCents, checkouttest.WebhookSecret)
			case rolePayTwice:
				if err = p.Client.Pay(ctx, c.id, c.view.AmountCents, checkouttest.WebhookSecret); err == nil {
					err = p.Client.Pay(ctx, c.id, c.view.AmountCents, checkouttest.WebhookSecret)
				}
			case roleCancel:
				var a checkouttest.Answer
				if a, err = p.Client.Do(ctx, http.MethodPost, "/v1/checkouts/"+c.id+"/cancel", nil, checkouttest.Buyer(c.view.CheckoutSecret), nil); err == nil && a.Code != http.StatusOK {
					err = fmt.Errorf("cancel answered %d %s", a.Code, a.Body)
				}
			}
			if err != nil {
				t.Errorf("%s %s: %v", c.role, c.id, err)
			}
		}()
	}
	wg.Wait()

	for _, c := range winners {
		c.final = waitFinal(t, p, c.id, c.view.CheckoutSecret)
	}
	settled := time.Since(started)

	want := map[role]shop.Status{rolePay: shop.StatusConfirmed, rolePayTwice: shop.StatusConfirmed,
		roleExpire: shop.StatusExpired, roleCancel: shop.StatusCancelled}
	counts := map[shop.Status]int{}
	var paidUnits int64
	for _, c := range winners {
		counts[c.final.Status]++
		if c.final.Status != want[c.role] {
			t.Errorf("cart %s (%s): ended %s, want %s", c.id, c.role, c.final.Status, want[c.role])
		}
		rec, err := p.Store.Checkout(ctx, c.id)
		if err != nil {
			t.Errorf("postgres has no checkout %s: %v", c.id, err)
			continue
		}
		if rec.Status != string(want[c.role]) {
			t.Errorf("postgres records %s as %s, want %s", c.id, rec.Status, want[c.role])
		}
		if want[c.role] == shop.StatusConfirmed {
			if rec.OrderID == "" {
				t.Errorf("paid checkout %s has no order in postgres", c.id)
			}
			for _, it := range c.items {
				if it.SKU == phone {
					paidUnits += it.Quantity
				}
			}
		}
		for _, it := range c.items {
			if held, err := p.Redis.HExists(ctx, lua.HoldsKey(it.SKU), c.id).Result(); err != nil || held {
				t.Errorf("checkout %s still holds %s in redis (err %v)", c.id, it.SKU, err)
			}
		}
	}

	for sku, units := range map[string]int64{phone: phoneUnits, cover: coverUnits} {
		v, err := p.Inventory.Get(ctx, sku)
		if err != nil {
			t.Fatalf("read %s: %v", sku, err)
		}
		var lines int64
		if err := p.Pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_lines WHERE sku = $1`, sku).Scan(&lines); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: stocked %d, sold %d (order lines %d), on_hand %d, available %d, held %d", sku, units, v.Sold, lines, v.OnHand, v.Available, v.Held)
		if v.Sold > units || v.Sold != lines || v.OnHand+v.Sold != units {
			t.Errorf("%s oversold or miscounted: stocked %d, sold %d, order lines %d, on_hand %d", sku, units, v.Sold, lines, v.OnHand)
		}
		if v.Available+v.Held != v.OnHand || v.Held != 0 {
			t.Errorf("%s at rest: available %d + held %d != on_hand %d (or units still held)", sku, v.Available, v.Held, v.OnHand)
		}
		if sku == phone && v.Sold != paidUnits {
			t.Errorf("%s: sold %d, but paid checkouts bought %d", sku, v.Sold, paidUnits)
		}
	}
	for _, c := range all {
		for _, code := range c.requests {
			if code >= 500 {
				t.Errorf("cart %s got a %d", c.id, code)
			}
		}
	}
	// The operator's audit, across Postgres, Redis and Temporal, must find nothing.
	report, err := checkouttest.CheckInvariants(ctx, p.Auditor())
	if err != nil {
		t.Errorf("audit after the sale: %v", err)
	}
	t.Logf("audit after the sale: %d checks, %d violations", len(report.Checks), len(report.Violations))
	t.Logf("flash sale: %d carts in %s (%d requests shed with 503 and retried) -> %d held, %d answered out_of_stock; confirmed %d, expired %d, cancelled %d; all settled after %s",
		carts, burst.Round(time.Millisecond), shed.Load(), len(winners), rejected,
		counts[shop.StatusConfirmed], counts[shop.StatusExpired], counts[shop.StatusCancelled], settled.Round(time.Millisecond))
}

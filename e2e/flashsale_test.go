// Package e2e runs the product end to end: a real Temporal dev server started from the
// pinned CLI build on free ports, the worker and the HTTP API in this test binary, real
// Redis and a fresh Postgres database.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stripe/stripe-go/v82/webhook"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

const (
	webhookSecret = "whsec_e2e_test_secret"
	adminToken    = "e2e-admin-token-0123456789"
)

// stack is the product running in-process against real services.
type stack struct {
	t     *testing.T
	url   string
	inv   *inventory.Inventory
	store *store.Store
	rdb   *redis.Client
	pool  *pgxpool.Pool
	tc    client.Client
	http  *http.Client
}

func newStack(t *testing.T) *stack {
	p := startProduct(t, productOptions{})
	url := p.serveAPI(api.Config{
		AdminToken: adminToken, StripeWebhookSecrets: []string{webhookSecret}, DefaultPaymentTimeoutSeconds: 600,
	}, p.tc, true)
	return &stack{t: t, url: url, inv: p.inv, store: p.store, rdb: p.rdb, pool: p.pool, tc: p.tc,
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// do sends a request and decodes a 2xx JSON answer into out (if not nil).
func (s *stack) do(method, path string, body []byte, header map[string]string, out any) (int, error) {
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(raw) > 0 && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s answer %q: %w", method, path, raw, err)
		}
	}
	return resp.StatusCode, nil
}

func (s *stack) stock(sku string, onHand int64) {
	body, _ := json.Marshal(map[string]any{"on_hand": onHand, "price_cents": 1_999, "currency": "usd", "max_per_order": 2})
	code, err := s.do(http.MethodPut, "/v1/inventory/"+sku, body, map[string]string{"Authorization": "Bearer " + adminToken}, nil)
	if err != nil || code != http.StatusOK {
		s.t.Fatalf("stock %s: %d %v", sku, code, err)
	}
}

// pay sends a correctly signed payment_intent.succeeded for the checkout.
func (s *stack) pay(checkoutID, eventID string, amount int64) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "type": "payment_intent.succeeded", "api_version": "2024-06-20",
		"data": map[string]any{"object": map[string]any{
			"id": "pi_" + checkoutID, "object": "payment_intent", "amount": amount, "amount_received": amount,
			"currency": "usd", "metadata": map[string]string{"checkout_id": checkoutID},
		}},
	})
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: webhookSecret})
	var answer map[string]string
	code, err := s.do(http.MethodPost, "/v1/webhooks/stripe", body, map[string]string{"Stripe-Signature": signed.Header}, &answer)
	if err == nil && code == http.StatusOK && answer["status"] != activities.DispositionSignalled && answer["status"] != "duplicate" {
		err = fmt.Errorf("webhook for %s answered %v", checkoutID, answer)
	}
	return code, err
}

// waitFinal polls a checkout until it reaches an end state.
func (s *stack) waitFinal(checkoutID string, deadline time.Time) (api.CheckoutView, error) {
	for {
		var v api.CheckoutView
		code, err := s.do(http.MethodGet, "/v1/checkouts/"+checkoutID, nil, nil, &v)
		if err == nil && code == http.StatusOK && v.Status.Final() {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("checkout %s not finished by the deadline: status %q, code %d, err %v", checkoutID, v.Status, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// TestFlashSale sells 50 units of two SKUs to 200 concurrent carts over HTTP. Winners are
// paid by signed webhooks (some delivered twice), left to expire on a 2 s timer, or
// cancelled. Afterwards nothing may be oversold, every paid checkout must be confirmed in
// Postgres, every other checkout's holds released, and available + held == on_hand.
func TestFlashSale(t *testing.T) {
	s := newStack(t)
	run := testenv.RandomID("")
	phone, cover := "PHONE-"+run, "COVER-"+run
	const phoneUnits, coverUnits = 50, 20
	s.stock(phone, phoneUnits)
	s.stock(cover, coverUnits)

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
			body, _ := json.Marshal(api.CheckoutRequest{CartID: c.id, CustomerID: "u-" + run, Items: c.items, PaymentTimeoutSeconds: ptr(c.role.timeout())})
			// Like a well-behaved client, retry a 503 (admission control shedding the burst)
			// after its Retry-After; the same cart id makes the retry safe.
			for attempt := 0; attempt < 30; attempt++ {
				code, err := s.do(http.MethodPost, "/v1/checkouts", body, nil, &c.view)
				if err != nil {
					t.Errorf("POST checkout %s: %v", c.id, err)
				}
				c.code = code
				if code != http.StatusServiceUnavailable {
					break
				}
				shed.Add(1)
				time.Sleep(time.Second)
			}
			c.requests = append(c.requests, c.code)
		}()
	}
	wg.Wait()
	burst := time.Since(started)

	var winners []*cart
	var rejected int
	for _, c := range all {
		switch c.code {
		case http.StatusCreated, http.StatusOK:
			// 200: an earlier attempt timed out (503) after its saga started, and the retry
			// attached to that saga, as a retried POST must.
			if c.view.Status != workflows.StatusAwaitingPayment {
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
	body, _ := json.Marshal(api.CheckoutRequest{CartID: retry.id, CustomerID: "u-" + run, Items: retry.items, PaymentTimeoutSeconds: ptr(retry.role.timeout())})
	var again api.CheckoutView
	if code, err := s.do(http.MethodPost, "/v1/checkouts", body, nil, &again); err != nil || code != http.StatusOK || again.WorkflowID != retry.view.WorkflowID {
		t.Errorf("retried POST of %s: %d %v %+v; want 200 with the same saga", retry.id, code, err, again)
	}

	// Act on every winner concurrently: pay, cancel, or let expire.
	for _, c := range winners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var code int
			var err error
			switch c.role {
			case rolePay:
				code, err = s.pay(c.id, "evt_"+c.id, c.view.AmountCents)
			case rolePayTwice:
				if code, err = s.pay(c.id, "evt_"+c.id, c.view.AmountCents); err == nil {
					code, err = s.pay(c.id, "evt_"+c.id, c.view.AmountCents)
				}
			case roleCancel:
				code, err = s.do(http.MethodPost, "/v1/checkouts/"+c.id+"/cancel", nil, nil, nil)
			default:
				return
			}
			if err != nil || code != http.StatusOK {
				t.Errorf("%s %s: %d %v", c.role, c.id, code, err)
			}
			c.requests = append(c.requests, code)
		}()
	}
	wg.Wait()

	deadline := time.Now().Add(90 * time.Second)
	for _, c := range winners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.waitFinal(c.id, deadline)
			if err != nil {
				t.Error(err)
			}
			c.final = v
		}()
	}
	wg.Wait()
	settled := time.Since(started)

	ctx := context.Background()
	want := map[role]workflows.Status{rolePay: workflows.StatusConfirmed, rolePayTwice: workflows.StatusConfirmed,
		roleExpire: workflows.StatusExpired, roleCancel: workflows.StatusCancelled}
	counts := map[workflows.Status]int{}
	var paidUnits int64
	for _, c := range winners {
		counts[c.final.Status]++
		if c.final.Status != want[c.role] {
			t.Errorf("cart %s (%s): ended %s, want %s", c.id, c.role, c.final.Status, want[c.role])
		}
		rec, err := s.store.Checkout(ctx, c.id)
		if err != nil {
			t.Errorf("postgres has no checkout %s: %v", c.id, err)
			continue
		}
		if rec.Status != string(want[c.role]) {
			t.Errorf("postgres records %s as %s, want %s", c.id, rec.Status, want[c.role])
		}
		if want[c.role] == workflows.StatusConfirmed {
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
			if held, err := s.rdb.HExists(ctx, lua.HoldsKey(it.SKU), c.id).Result(); err != nil || held {
				t.Errorf("checkout %s still holds %s in redis (err %v)", c.id, it.SKU, err)
			}
		}
	}

	for sku, units := range map[string]int64{phone: phoneUnits, cover: coverUnits} {
		v, err := s.inv.Get(ctx, sku)
		if err != nil {
			t.Fatalf("read %s: %v", sku, err)
		}
		var lines int64
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_lines WHERE sku = $1`, sku).Scan(&lines); err != nil {
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
	report, err := audit.New(s.pool, s.rdb, s.tc, audit.Options{Grace: -1}).Run(ctx)
	if err != nil || !report.Clean() {
		t.Errorf("audit after the sale: %v; violations %+v", err, report.Violations)
	}
	t.Logf("audit after the sale: %d checks, %d violations", len(report.Checks), len(report.Violations))
	t.Logf("flash sale: %d carts in %s (%d requests shed with 503 and retried) -> %d held, %d answered out_of_stock; confirmed %d, expired %d, cancelled %d; all settled after %s",
		carts, burst.Round(time.Millisecond), shed.Load(), len(winners), rejected,
		counts[workflows.StatusConfirmed], counts[workflows.StatusExpired], counts[workflows.StatusCancelled], settled.Round(time.Millisecond))
}

func ptr[T any](v T) *T { return &v }

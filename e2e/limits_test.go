package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// One customer sends 1,000 checkouts of a SKU with max_per_customer 2 at once, through the
// API, each a different cart: exactly 2 are held (201) and every other one is 409
// customer_limit, with nothing held for it.
func TestOneCustomerThousandConcurrentCheckoutsHoldExactlyTheLimit(t *testing.T) {
	t.Parallel()
	p := checkouttest.Start(t, checkouttest.Options{API: api.Config{DefaultPaymentTimeoutSeconds: 600}})
	sku := testenv.RandomID("LIMIT-")
	if _, err := p.Inventory.Set(t.Context(), shop.Product{SKU: sku, OnHand: 500, SaleTerms: shop.SaleTerms{PriceCents: unitPrice, Currency: "usd", MaxPerOrder: 2, MaxPerCustomer: 2}}); err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
	customer, run := testenv.RandomID("u-"), testenv.RandomID("")
	client := checkouttest.NewClient(p.URL)
	client.MaxRetries = 60

	const carts = 1000
	codes := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range carts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A well-behaved client: a 503 is retried, with the same cart id, after Retry-After.
			// A cart that waits in the waiting room (202) is followed until it leaves it: its
			// saga's refusal then reads as the POST's would have.
			var v api.CheckoutView
			a, err := client.Checkout(t.Context(), api.CheckoutRequest{CartID: fmt.Sprintf("lim-%s-%d", run, i), CustomerID: customer,
				Items: []api.RequestItem{{SKU: sku, Quantity: 1}}}, nil, &v)
			answer := strconv.Itoa(a.Code) + " " + a.Problem
			switch {
			case a.Queued && v.Status == shop.StatusAwaitingPayment:
				answer = "201 "
			case a.Queued && v.Status == shop.StatusOutOfStock && v.ReasonCode != nil:
				answer = "409 " + *v.ReasonCode
			}
			if err != nil {
				answer = "error: " + err.Error()
			}
			mu.Lock()
			codes[answer]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// The rest are refused for the customer's limit: by the saga (409 customer_limit), or
	// by the waiting room, which holds at most a customer's open checkouts (429).
	if codes["201 "] != 2 || codes["409 customer_limit"]+codes["429 too_many_open_checkouts"] != carts-2 {
		t.Errorf("answers to %d concurrent checkouts of one customer (max_per_customer 2): %v; want 2 x 201 and the rest 409 customer_limit or 429 too_many_open_checkouts", carts, codes)
	}
	v, err := p.Inventory.Get(t.Context(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if v.Held != 2 || v.Available != 498 {
		t.Errorf("after the burst: %+v; want exactly 2 held", v)
	}
}

// With client tokens, the shop backend that started a cart reads and cancels it, and another
// one cannot even see it.
func TestClientTokensKeepCartsApartEndToEnd(t *testing.T) {
	t.Parallel()
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true})
	tokens, err := api.ParseClientTokens("shop-a=token-of-shop-a-0001,shop-b=token-of-shop-b-0002")
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{AdminToken: checkouttest.AdminToken, DefaultPaymentTimeoutSeconds: 600, ClientTokens: tokens}
	deps := api.Deps{Temporal: p.Temporal, Catalog: p.Store, Inventory: p.Inventory, Records: p.Store, Payments: p.Store, Owners: p.Store, Logger: p.Logger}
	hs := httptest.NewServer(api.New(cfg, deps))
	t.Cleanup(hs.Close)
	sku := testenv.RandomID("CLIENT-")
	if _, err := p.Inventory.Set(t.Context(), shop.Product{SKU: sku, OnHand: 5, SaleTerms: shop.SaleTerms{PriceCents: unitPrice, Currency: "usd", MaxPerOrder: 2}}); err != nil {
		t.Fatal(err)
	}
	cart := testenv.RandomID("cart-")
	call := func(method, path, token, body string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	a, b := "token-of-shop-a-0001", "token-of-shop-b-0002"
	post := `{"cart_id":"` + cart + `","customer_id":"u-1","items":[{"sku":"` + sku + `","quantity":1}]}`
	for _, step := range []struct {
		what                string
		method, path, token string
		want                int
	}{
		{"shop a starts the cart", http.MethodPost, "/v1/checkouts", a, http.StatusCreated},
		{"shop b posts the same cart id", http.MethodPost, "/v1/checkouts", b, http.StatusConflict},
		{"shop a reads it", http.MethodGet, "/v1/checkouts/" + cart, a, http.StatusOK},
		{"shop b reads it", http.MethodGet, "/v1/checkouts/" + cart, b, http.StatusNotFound},
		{"shop b cancels it", http.MethodPost, "/v1/checkouts/" + cart + "/cancel", b, http.StatusNotFound},
		{"anonymous reads it", http.MethodGet, "/v1/checkouts/" + cart, "", http.StatusUnauthorized},
		{"shop a cancels it", http.MethodPost, "/v1/checkouts/" + cart + "/cancel", a, http.StatusOK},
	} {
		body := ""
		if step.method == http.MethodPost && step.path == "/v1/checkouts" {
			body = post
		}
		if got := call(step.method, step.path, step.token, body); got != step.want {
			t.Errorf("%s: %d, want %d", step.what, got, step.want)
		}
	}
}

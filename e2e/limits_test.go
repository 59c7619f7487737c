package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// One customer sends 1,000 checkouts of a SKU with max_per_customer 2 at once, through the
// API, each a different cart: exactly 2 are held (201) and every other one is 409
// customer_limit, with nothing held for it.
func TestOneCustomerThousandConcurrentCheckoutsHoldExactlyTheLimit(t *testing.T) {
	p := startProduct(t, productOptions{})
	base := p.serveAPI(api.Config{AdminToken: adminToken, DefaultPaymentTimeoutSeconds: 600}, p.tc, true)
	sku := testenv.RandomID("LIMIT-")
	if _, err := p.inv.Set(t.Context(), activities.Product{SKU: sku, OnHand: 500, PriceCents: unitPrice, Currency: "usd", MaxPerOrder: 2, MaxPerCustomer: 2}); err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
	customer, run := testenv.RandomID("u-"), testenv.RandomID("")
	client := &http.Client{Timeout: 60 * time.Second}

	const carts = 1000
	codes := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range carts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(api.CheckoutRequest{CartID: fmt.Sprintf("lim-%s-%d", run, i), CustomerID: customer,
				Items: []api.RequestItem{{SKU: sku, Quantity: 1}}})
			answer := "no answer"
			// A well-behaved client: a 503 is retried, with the same cart id, after Retry-After.
			for range 60 {
				resp, err := client.Post(base+"/v1/checkouts", "application/json", bytes.NewReader(body))
				if err != nil {
					answer = "error: " + err.Error()
					break
				}
				var prob struct {
					Code string `json:"code"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&prob)
				resp.Body.Close()
				answer = strconv.Itoa(resp.StatusCode) + " " + prob.Code
				if resp.StatusCode != http.StatusServiceUnavailable {
					break
				}
				wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				time.Sleep(time.Duration(max(wait, 1)) * time.Second)
			}
			mu.Lock()
			codes[answer]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes["201 "] != 2 || codes["409 customer_limit"] != carts-2 {
		t.Errorf("answers to %d concurrent checkouts of one customer (max_per_customer 2): %v; want 2 x 201 and the rest 409 customer_limit", carts, codes)
	}
	v, err := p.inv.Get(t.Context(), sku)
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
	p := startProduct(t, productOptions{})
	tokens, err := api.ParseClientTokens("shop-a=token-of-shop-a-0001,shop-b=token-of-shop-b-0002")
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{AdminToken: adminToken, DefaultPaymentTimeoutSeconds: 600, ClientTokens: tokens}
	deps := api.Deps{Temporal: p.tc, Catalog: p.store, Inventory: p.inv, Records: p.store, Payments: p.store, Owners: p.store, Logger: p.logger}
	hs := httptest.NewServer(api.New(cfg, deps))
	t.Cleanup(hs.Close)
	sku := testenv.RandomID("CLIENT-")
	if _, err := p.inv.Set(t.Context(), activities.Product{SKU: sku, OnHand: 5, PriceCents: unitPrice, Currency: "usd", MaxPerOrder: 2}); err != nil {
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

package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/store"
)

// With client authentication on, a client needs its bearer token, and another client's cart
// is as good as absent: GET and cancel are 404, a POST of its cart id is 409.
func TestClientTokensKeepCartsApart(t *testing.T) {
	tokens, err := api.ParseClientTokens("shop-a=token-of-shop-a-0001,shop-b=token-of-shop-b-0002")
	if err != nil {
		t.Fatal(err)
	}
	var records *store.Store
	h := newHarness(t, func(cfg *api.Config, deps *api.Deps) {
		cfg.ClientTokens = tokens
		records = deps.Records.(*store.Store)
		deps.Owners = records
	})
	if owner, err := records.ClaimCheckout(t.Context(), "cart-of-a", "shop-a"); err != nil || owner != "shop-a" {
		t.Fatalf("claim: %q %v", owner, err)
	}
	sku := h.stockSKU(t, "CLI-", 5, 100, 2, "usd")
	post := `{"cart_id":"cart-of-a","customer_id":"u-1","items":[{"sku":"` + sku + `","quantity":1}]}`
	for _, tc := range []struct {
		name   string
		r      request
		status int
		code   string
	}{
		{"POST without a token", request{method: http.MethodPost, path: "/v1/checkouts", body: body(post)}, 401, "unauthorized"},
		{"POST with an unknown token", request{method: http.MethodPost, path: "/v1/checkouts", body: body(post), header: bearer("token-of-nobody-000")}, 401, "unauthorized"},
		{"POST of another client's cart id", request{method: http.MethodPost, path: "/v1/checkouts", body: body(post), header: bearer("token-of-shop-b-0002")}, 409, "cart_id_taken"},
		{"GET without a token", request{method: http.MethodGet, path: "/v1/checkouts/cart-of-a"}, 401, "unauthorized"},
		{"GET of another client's cart", request{method: http.MethodGet, path: "/v1/checkouts/cart-of-a", header: bearer("token-of-shop-b-0002")}, 404, "not_found"},
		{"cancel of another client's cart", request{method: http.MethodPost, path: "/v1/checkouts/cart-of-a/cancel", header: bearer("token-of-shop-b-0002")}, 404, "not_found"},
		{"GET of a cart no client started", request{method: http.MethodGet, path: "/v1/checkouts/cart-of-nobody", header: bearer("token-of-shop-a-0001")}, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problemOf(t, h.do(t, tc.r), tc.status, tc.code)
		})
	}
	h.assertUntouched(t, sku, 5)
	for _, bad := range []string{"shop-a", "shop-a=short", "shop a=token-of-shop-a-0001", "a=token-of-shop-a-0001,b=token-of-shop-a-0001"} {
		if _, err := api.ParseClientTokens(bad); err == nil {
			t.Errorf("ParseClientTokens(%q) accepted it", bad)
		}
	}
}

// With client tokens on, a cart is bound to its client only once it is about to start a
// saga: sold-out losers and bad carts cost no Postgres write and leave no claim behind.
func TestRefusedCheckoutsClaimNoCart(t *testing.T) {
	tokens, err := api.ParseClientTokens("shop-a=token-of-shop-a-0001")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(cfg *api.Config, deps *api.Deps) {
		cfg.ClientTokens = tokens
		deps.Owners = deps.Records.(*store.Store)
		deps.Gate = lua.New(testenv.Redis(t))
	})
	soldOut := h.stockSKU(t, "GONE-", 0, 100, 2, "usd")
	run := testenv.RandomID("")
	for i := range 200 {
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", header: bearer("token-of-shop-a-0001"),
			body: body(cart(fmt.Sprintf("lost-%s-%d", run, i), "u-1", soldOut, 1))})
		if rec.Code != http.StatusConflict {
			t.Fatalf("sold-out cart %d: %d %s, want 409", i, rec.Code, rec.Body)
		}
	}
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", header: bearer("token-of-shop-a-0001"),
		body: body(cart("bad-"+run, "u-1", "NOPE-"+run, 1))})
	problemOf(t, rec, http.StatusUnprocessableEntity, "unknown_sku")
	var claims int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM checkout_clients`).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims != 0 {
		t.Errorf("200 sold-out carts and one of an unknown SKU left %d rows in checkout_clients, want 0", claims)
	}
}

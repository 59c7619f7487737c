package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/openapitest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

const testAdminToken = "test-admin-token"

// harness is an API server on a fresh Postgres database and the test Redis, with no
// Temporal client: every request these tests send must be answered before the API talks
// to Temporal, so reaching it (a nil client) panics into a 500 the test reports.
type harness struct {
	e      *echo.Echo
	srv    *api.Server
	pool   *pgxpool.Pool
	inv    *inventory.Inventory
	stock  *lua.Stock
	logger *slog.Logger
}

func newHarness(t *testing.T, configure func(*api.Config, *api.Deps)) *harness {
	t.Helper()
	_, pool := testenv.Postgres(t)
	rdb := testenv.Redis(t)
	db := store.New(pool)
	stock := lua.New(rdb)
	inv := &inventory.Inventory{Store: db, Stock: stock}
	cfg := api.Config{
		AdminToken:                   testAdminToken,
		StripeWebhookSecrets:         []string{"whsec_a", "whsec_b"},
		DefaultPaymentTimeoutSeconds: 900,
		TemporalUIURL:                "http://localhost:8233",
	}
	deps := api.Deps{
		Catalog:   db,
		Inventory: inv,
		Records:   db,
		Payments:  db,
		Keys:      db,
		Logger:    slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if configure != nil {
		configure(&cfg, &deps)
	}
	srv := api.NewServer(cfg, deps)
	return &harness{e: srv.Handler(), srv: srv, pool: pool, inv: inv, stock: stock, logger: deps.Logger}
}

// sku returns a fresh SKU whose Redis keys are removed when the test ends.
func (h *harness) sku(t *testing.T, prefix string) string {
	t.Helper()
	sku := testenv.RandomID(prefix)
	rdb := testenv.Redis(t)
	t.Cleanup(func() { rdb.Del(t.Context(), lua.StockKey(sku), lua.HoldsKey(sku)) })
	return sku
}

// stockSKU stocks a fresh SKU directly through Inventory.Set.
func (h *harness) stockSKU(t *testing.T, prefix string, onHand, priceCents, maxPerOrder int64, currency string) string {
	t.Helper()
	sku := h.sku(t, prefix)
	if _, err := h.inv.Set(t.Context(), shop.Product{
		SKU: sku, OnHand: onHand, SaleTerms: shop.SaleTerms{PriceCents: priceCents, Currency: currency, MaxPerOrder: maxPerOrder},
	}); err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
	return sku
}

// assertUntouched checks that nothing of sku is held: available == on_hand, held == 0.
func (h *harness) assertUntouched(t *testing.T, sku string, onHand int64) {
	t.Helper()
	v, err := h.inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get inventory of %s: %v", sku, err)
	}
	if v.OnHand != onHand || v.Available != onHand || v.Held != 0 {
		t.Errorf("inventory of %s = %+v, want on_hand = available = %d and held 0", sku, v, onHand)
	}
}

type request struct {
	method, path string
	body         io.Reader
	header       map[string]string
}

// httpRequest is r as the API receives it: a body is JSON.
func (r request) httpRequest() *http.Request {
	req := httptest.NewRequest(r.method, r.path, r.body)
	if r.body != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	return req
}

func (h *harness) do(t *testing.T, r request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	// Every exchange is checked against api/openapi.json: an answer it does not describe fails
	// the test.
	openapitest.Handler(t, h.e).ServeHTTP(rec, r.httpRequest())
	return rec
}

// serveFrom sends r from the client address addr (host:port) straight to Echo, for the tests
// that count answers per caller (limits, request log, waits), without do's check of each
// answer against api/openapi.json.
func (h *harness) serveFrom(addr string, r request) *httptest.ResponseRecorder {
	req := r.httpRequest()
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec
}

func body(s string) io.Reader { return strings.NewReader(s) }

// buyerOf is the Checkout-Secret header of cart's buyer, signed with the key the harness's
// API uses (api.DevCheckoutSecretKey, unless a test sets its own).
func buyerOf(cart string) map[string]string {
	return map[string]string{api.CheckoutSecretHeader: api.CheckoutSecret(api.DevCheckoutSecretKey, cart)}
}

// buyerGet is the buyer's GET of cart, query ("" or "?wait=N") included.
func buyerGet(cart, query string) request {
	return request{method: http.MethodGet, path: "/v1/checkouts/" + cart + query, header: buyerOf(cart)}
}

func bearer(token string) map[string]string {
	return map[string]string{echo.HeaderAuthorization: "Bearer " + token}
}

// problemOf asserts rec is a problem+json with status and code, and returns it.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) api.Problem {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get(echo.HeaderContentType); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("decode problem %q: %v", rec.Body, err)
	}
	if p.Code != code {
		t.Errorf("code = %q, want %q (detail %q)", p.Code, code, p.Detail)
	}
	if p.Status != rec.Code {
		t.Errorf("problem status = %d, response status = %d", p.Status, rec.Code)
	}
	if p.Title != http.StatusText(rec.Code) {
		t.Errorf("problem title = %q, want %q", p.Title, http.StatusText(rec.Code))
	}
	return p
}

// assertNames checks that the problem names field, in errors[].field or in its detail.
func assertNames(t *testing.T, p api.Problem, field string) {
	t.Helper()
	for _, fe := range p.Errors {
		if fe.Field == field {
			return
		}
	}
	if strings.Contains(p.Detail, field) {
		return
	}
	t.Errorf("problem does not name %q: detail %q, errors %+v", field, p.Detail, p.Errors)
}

func decodeJSON(t *testing.T, rec *httptest.ResponseRecorder, v any) {
	t.Helper()
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("decode %q: %v", rec.Body, err)
	}
}

// assertHeld checks that exactly held units of sku are held.
func (h *harness) assertHeld(t *testing.T, sku string, held int64) {
	t.Helper()
	v, err := h.inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get inventory of %s: %v", sku, err)
	}
	if v.Held != held || v.Available+v.Held != v.OnHand {
		t.Errorf("inventory of %s = %+v, want held %d and available + held == on_hand", sku, v, held)
	}
}

package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/shop"
)

func TestInventoryRequiresTheAdminToken(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	put := `{"on_hand": 1, "price_cents": 1, "currency": "usd", "max_per_order": 1}`
	for _, auth := range []struct {
		name, header string
	}{
		{"no header", ""},
		{"wrong token", "Bearer not-the-token"},
		{"token with a suffix", "Bearer " + testAdminToken + "x"},
		{"token as basic auth", "Basic " + testAdminToken},
		{"token without a scheme", testAdminToken},
		{"empty bearer", "Bearer "},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			t.Run(auth.name+" "+method, func(t *testing.T) {
				r := request{method: method, path: "/v1/inventory/" + sku, header: map[string]string{}}
				if auth.header != "" {
					r.header[echo.HeaderAuthorization] = auth.header
				}
				if method == http.MethodPut {
					r.body = body(put)
				}
				rec := h.do(t, r)
				problemOf(t, rec, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(rec.Header().Get(echo.HeaderWWWAuthenticate), "Bearer") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", rec.Header().Get(echo.HeaderWWWAuthenticate))
				}
			})
		}
	}
	// Nothing changed through the refused PUTs.
	h.assertUntouched(t, sku, 10)
}

// TestInventoryWithoutConfiguredTokenRefusesEveryone guards against an empty ADMIN_TOKEN
// matching an empty bearer.
func TestInventoryWithoutConfiguredTokenRefusesEveryone(t *testing.T) {
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.AdminToken = "" })
	for _, hdr := range []string{"Bearer ", "Bearer", ""} {
		rec := h.do(t, request{method: http.MethodGet, path: "/v1/inventory/ANY", header: map[string]string{echo.HeaderAuthorization: hdr}})
		problemOf(t, rec, http.StatusUnauthorized, "unauthorized")
	}
}

func TestPutInventoryRefusesBadBodies(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.sku(t, "PHONE-")
	tests := []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"negative on_hand", `{"on_hand": -1, "price_cents": 1, "currency": "usd", "max_per_order": 1}`, 422, "invalid_request", "on_hand"},
		{"on_hand too large", `{"on_hand": 1000000001, "price_cents": 1, "currency": "usd", "max_per_order": 1}`, 422, "invalid_request", "on_hand"},
		{"missing on_hand", `{"price_cents": 1, "currency": "usd", "max_per_order": 1}`, 422, "invalid_request", "on_hand"},
		{"missing price_cents", `{"on_hand": 1, "currency": "usd", "max_per_order": 1}`, 422, "invalid_request", "price_cents"},
		{"negative price_cents", `{"on_hand": 1, "price_cents": -1, "currency": "usd", "max_per_order": 1}`, 422, "invalid_request", "price_cents"},
		{"currency dollars", `{"on_hand": 1, "price_cents": 1, "currency": "dollars", "max_per_order": 1}`, 422, "invalid_request", "currency"},
		{"currency with digits", `{"on_hand": 1, "price_cents": 1, "currency": "us1", "max_per_order": 1}`, 422, "invalid_request", "currency"},
		{"missing currency", `{"on_hand": 1, "price_cents": 1, "max_per_order": 1}`, 422, "invalid_request", "currency"},
		{"max_per_order 0", `{"on_hand": 1, "price_cents": 1, "currency": "usd", "max_per_order": 0}`, 422, "invalid_request", "max_per_order"},
		{"missing max_per_order", `{"on_hand": 1, "price_cents": 1, "currency": "usd"}`, 422, "invalid_request", "max_per_order"},
		{"unknown field", `{"on_hand": 1, "price_cents": 1, "currency": "usd", "max_per_order": 1, "colour": "red"}`, 400, "invalid_json", "colour"},
		{"on_hand as a string", `{"on_hand": "1", "price_cents": 1, "currency": "usd", "max_per_order": 1}`, 400, "invalid_json", "on_hand"},
		{"malformed JSON", `{"on_hand": 1,`, 400, "invalid_json", ""},
		{"empty body", ``, 400, "invalid_json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + sku, body: body(tt.body), header: bearer(testAdminToken)})
			p := problemOf(t, rec, tt.status, tt.code)
			if tt.field != "" {
				assertNames(t, p, tt.field)
			}
		})
	}
	// None of them created the SKU.
	rec := h.do(t, request{method: http.MethodGet, path: "/v1/inventory/" + sku, header: bearer(testAdminToken)})
	problemOf(t, rec, http.StatusNotFound, "not_found")

	t.Run("bad sku in the path", func(t *testing.T) {
		rec := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + strings.Repeat("S", 65),
			body: body(`{"on_hand": 1, "price_cents": 1, "currency": "usd", "max_per_order": 1}`), header: bearer(testAdminToken)})
		assertNames(t, problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request"), "sku")
		rec = h.do(t, request{method: http.MethodGet, path: "/v1/inventory/a%20b", header: bearer(testAdminToken)})
		assertNames(t, problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request"), "sku")
	})
}

func TestPutThenGetInventory(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.sku(t, "PHONE-")
	path := "/v1/inventory/" + sku

	rec := h.do(t, request{method: http.MethodGet, path: path, header: bearer(testAdminToken)})
	problemOf(t, rec, http.StatusNotFound, "not_found")

	put := h.putInventory(t, sku, `{"on_hand": 100, "price_cents": 99900, "currency": "USD", "max_per_order": 2}`)
	want := shop.InventoryView{SKU: sku, OnHand: 100, Available: 100, PriceCents: 99900, Currency: "usd", MaxPerOrder: 2}
	if put != want {
		t.Errorf("PUT view = %+v, want %+v", put, want)
	}

	// A checkout holds 2; GET shows on_hand == available + held.
	if _, err := h.stock.Reserve(t.Context(), sku, "c-held", 2); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	rec = h.do(t, request{method: http.MethodGet, path: path, header: bearer(testAdminToken)})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET status = %d, want 200; body %s", rec.Code, rec.Body)
	}
	var got map[string]any
	decodeJSON(t, rec, &got)
	for _, k := range []string{"sku", "on_hand", "available", "held", "sold", "price_cents", "currency", "max_per_order"} {
		if _, ok := got[k]; !ok {
			t.Errorf("GET body %s lacks %q", rec.Body, k)
		}
	}
	var view shop.InventoryView
	decodeJSON(t, rec, &view)
	if view.OnHand != view.Available+view.Held || view.Held != 2 || view.Available != 98 || view.Sold != 0 {
		t.Errorf("GET view = %+v, want on_hand 100 = available 98 + held 2", view)
	}
}

func TestPutInventoryBelowHeldIsRefused(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.sku(t, "PHONE-")
	path := "/v1/inventory/" + sku
	h.putInventory(t, sku, `{"on_hand": 10, "price_cents": 500, "currency": "usd", "max_per_order": 5}`)
	if _, err := h.stock.Reserve(t.Context(), sku, "c-1", 5); err != nil {
		t.Fatalf("reserve: %v", err)
	}

	rec := h.do(t, request{method: http.MethodPut, path: path, header: bearer(testAdminToken),
		body: body(`{"on_hand": 3, "price_cents": 700, "currency": "eur", "max_per_order": 9}`)})
	problemOf(t, rec, http.StatusConflict, "on_hand_below_held")

	var onHand, price, limit int64
	var currency string
	if err := h.pool.QueryRow(t.Context(), `SELECT on_hand, price_cents, currency, max_per_order FROM skus WHERE sku = $1`, sku).
		Scan(&onHand, &price, &currency, &limit); err != nil {
		t.Fatalf("read sku: %v", err)
	}
	if onHand != 10 || price != 500 || currency != "usd" || limit != 5 {
		t.Errorf("postgres row = %d %d %s %d after a refused PUT, want 10 500 usd 5", onHand, price, currency, limit)
	}
	var ledger int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM inventory_ledger WHERE sku = $1`, sku).Scan(&ledger); err != nil {
		t.Fatalf("count ledger: %v", err)
	}
	if ledger != 1 {
		t.Errorf("ledger has %d rows, want 1 (the first PUT only)", ledger)
	}
	v, err := h.inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if v.OnHand != 10 || v.Available != 5 || v.Held != 5 {
		t.Errorf("view = %+v, want on_hand 10, available 5, held 5", v)
	}

	// Exactly what is held is allowed: nothing left available.
	view := h.putInventory(t, sku, `{"on_hand": 5, "price_cents": 500, "currency": "usd", "max_per_order": 5}`)
	if view.OnHand != 5 || view.Available != 0 || view.Held != 5 {
		t.Errorf("view = %+v, want on_hand 5, available 0, held 5", view)
	}
}

// putInventory sets a SKU as an operator does (PUT /v1/inventory/{sku}, admin token), requires
// 200 and returns the view answered.
func (h *harness) putInventory(t *testing.T, sku, product string) shop.InventoryView {
	t.Helper()
	rec := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + sku, header: bearer(testAdminToken), body: body(product)})
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT %s: status %d, want 200; body %s", product, rec.Code, rec.Body)
	}
	var v shop.InventoryView
	decodeJSON(t, rec, &v)
	return v
}

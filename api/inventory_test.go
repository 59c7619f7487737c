package api_test

import (
	"fmt"
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
	want := shop.InventoryView{SKU: sku, OnHand: 100, Available: 100, SaleTerms: shop.SaleTerms{PriceCents: 99900, Currency: "usd", MaxPerOrder: 2}}
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

// A lost update: an operator reads on_hand 100, ten units are sold, and they PUT 200
// meaning "+100". With If-Match the stale PUT is 412 version_mismatch and nothing changes.
func TestPutInventoryIfMatchRefusesAStaleETag(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.stockSKU(t, "PHONE-", 100, 99900, 20, "usd")
	admin := bearer(testAdminToken)
	got := h.do(t, request{method: http.MethodGet, path: "/v1/inventory/" + sku, header: admin})
	etag := got.Header().Get("ETag")
	if got.Code != http.StatusOK || len(etag) < 3 || etag[0] != '"' {
		t.Fatalf("GET: %d, ETag %q; want 200 with a strong ETag", got.Code, etag)
	}
	h.sell(t, sku, 10)
	if again := h.do(t, request{method: http.MethodGet, path: "/v1/inventory/" + sku, header: admin}); again.Header().Get("ETag") == etag {
		t.Fatalf("ETag %s unchanged after a sale changed on_hand", etag)
	}

	put := `{"on_hand": 200, "price_cents": 99900, "currency": "usd", "max_per_order": 20}`
	hdr := map[string]string{"Authorization": admin["Authorization"], "If-Match": etag}
	problemOf(t, h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + sku, body: body(put), header: hdr}),
		http.StatusPreconditionFailed, "version_mismatch")
	if v, _ := h.inv.Get(t.Context(), sku); v.OnHand != 90 || v.Sold != 10 {
		t.Fatalf("after the refused PUT: %+v; want on_hand 90, sold 10 unchanged", v)
	}

	// With the current ETag the PUT applies, and answers the new ETag.
	cur := h.do(t, request{method: http.MethodGet, path: "/v1/inventory/" + sku, header: admin}).Header().Get("ETag")
	hdr["If-Match"] = cur
	rec := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + sku, body: body(put), header: hdr})
	var v shop.InventoryView
	decodeJSON(t, rec, &v)
	if rec.Code != http.StatusOK || v.OnHand != 200 || rec.Header().Get("ETag") == cur || rec.Header().Get("ETag") == "" {
		t.Fatalf("PUT with the current ETag: %d %+v ETag %q; want 200, on_hand 200, a new ETag", rec.Code, v, rec.Header().Get("ETag"))
	}
	h.assertLedger(t, sku)
}

func TestAdjustmentAppliesOnceAndRefusesToTakeHeldUnits(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.stockSKU(t, "PHONE-", 10, 99900, 5, "usd")
	adjust := func(key, b string) (int, shop.InventoryView, string) {
		hdr := bearer(testAdminToken)
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/inventory/" + sku + "/adjustments", body: body(b), header: hdr})
		var v shop.InventoryView
		if rec.Code == http.StatusOK {
			decodeJSON(t, rec, &v)
		}
		return rec.Code, v, rec.Body.String()
	}
	h.sell(t, sku, 2) // on_hand 8, sold 2

	code, v, raw := adjust("k-1", `{"delta": 25, "reason": "restock"}`)
	if code != http.StatusOK || v.OnHand != 33 || v.Available != 33 || v.Sold != 2 {
		t.Fatalf("adjust +25: %d %s; want 200, on_hand 33 (8 + 25)", code, raw)
	}
	// The same key and body: the same answer, nothing applied again.
	if code, again, _ := adjust("k-1", `{"delta": 25, "reason": "restock"}`); code != http.StatusOK || again != v {
		t.Errorf("retried adjust: %d %+v; want 200 %+v", code, again, v)
	}
	// The same key with another body.
	_, _, raw = adjust("k-1", `{"delta": 26, "reason": "restock"}`)
	if cur, _ := h.inv.Get(t.Context(), sku); cur.OnHand != 33 {
		t.Errorf("after a reused key: on_hand %d, want 33", cur.OnHand)
	}
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/inventory/" + sku + "/adjustments", body: body(`{"delta": 26, "reason": "restock"}`),
		header: map[string]string{"Authorization": "Bearer " + testAdminToken, "Idempotency-Key": "k-1"}})
	problemOf(t, rec, http.StatusUnprocessableEntity, "idempotency_key_reused")

	// A decrease beyond the units not held: 409, nothing changed.
	if _, err := h.stock.Reserve(t.Context(), sku, "c-holder", 2); err != nil {
		t.Fatal(err)
	}
	rec = h.do(t, request{method: http.MethodPost, path: "/v1/inventory/" + sku + "/adjustments", body: body(`{"delta": -32, "reason": "damaged"}`), header: bearer(testAdminToken)})
	problemOf(t, rec, http.StatusConflict, "insufficient_stock")
	if cur, _ := h.inv.Get(t.Context(), sku); cur.OnHand != 33 || cur.Available != 31 || cur.Held != 2 {
		t.Errorf("after a refused decrease: %+v; want on_hand 33, available 31, held 2", cur)
	}
	if code, v, raw := adjust("", `{"delta": -31, "reason": "damaged"}`); code != http.StatusOK || v.OnHand != 2 || v.Available != 0 || v.Held != 2 {
		t.Errorf("adjust -31 (every unit not held): %d %s; want on_hand 2, held 2", code, raw)
	}

	// Unknown SKU, and bad bodies.
	rec = h.do(t, request{method: http.MethodPost, path: "/v1/inventory/NO-SUCH-SKU/adjustments", body: body(`{"delta": 1, "reason": "x"}`), header: bearer(testAdminToken)})
	problemOf(t, rec, http.StatusNotFound, "not_found")
	for _, b := range []string{`{"delta": 0, "reason": "x"}`, `{"reason": "x"}`, `{"delta": 1}`, `{"delta": 1, "reason": ""}`,
		fmt.Sprintf(`{"delta": 1, "reason": %q}`, string(make([]byte, 201)))} {
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/inventory/" + sku + "/adjustments", body: body(b), header: bearer(testAdminToken)})
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusUnprocessableEntity {
			t.Errorf("adjust %s: %d, want 400 or 422", b, rec.Code)
		}
	}
	rec = h.do(t, request{method: http.MethodPost, path: "/v1/inventory/" + sku + "/adjustments", body: body(`{"delta": 1, "reason": "x"}`)})
	problemOf(t, rec, http.StatusUnauthorized, "unauthorized")

	// Every change is a ledger row with its reason; on_hand + sold == the ledger's sum.
	var restock int64
	_ = h.pool.QueryRow(t.Context(), `SELECT count(*) FROM inventory_ledger WHERE sku = $1 AND reason = 'restock'`, sku).Scan(&restock)
	if restock != 1 {
		t.Errorf("%d ledger rows with reason restock, want 1", restock)
	}
	h.assertLedger(t, sku)
}

// sell sells n units of sku as the saga's confirmation does: a hold in Redis, on_hand to
// sold with a ledger row in Postgres, then the commit.
func (h *harness) sell(t *testing.T, sku string, n int64) {
	t.Helper()
	id := fmt.Sprintf("c-sell-%s-%d", sku, n)
	if _, err := h.stock.Reserve(t.Context(), sku, id, n); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(t.Context(), `
		WITH s AS (UPDATE skus SET on_hand = on_hand - $2, sold = sold + $2 WHERE sku = $1 RETURNING sku)
		INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) SELECT sku, -$2, $2, 'sold' FROM s`, sku, n); err != nil {
		t.Fatal(err)
	}
	if _, err := h.stock.Commit(t.Context(), sku, id); err != nil {
		t.Fatal(err)
	}
}

// assertLedger checks on_hand + sold == the sum of every change in the ledger.
func (h *harness) assertLedger(t *testing.T, sku string) {
	t.Helper()
	var onHand, sold, ledger int64
	if err := h.pool.QueryRow(t.Context(), `
		SELECT s.on_hand, s.sold, (SELECT coalesce(sum(delta_on_hand + delta_sold), 0) FROM inventory_ledger WHERE sku = s.sku)
		FROM skus s WHERE s.sku = $1`, sku).Scan(&onHand, &sold, &ledger); err != nil {
		t.Fatal(err)
	}
	if onHand+sold != ledger {
		t.Errorf("%s: on_hand %d + sold %d != ledger sum %d", sku, onHand, sold, ledger)
	}
}

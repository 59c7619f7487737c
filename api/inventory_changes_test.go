package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

// The review's H1: an operator reads on_hand 100, ten units are sold, and they PUT 200
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

func TestAdjustInventory(t *testing.T) {
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

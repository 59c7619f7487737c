package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// A scheduled drop through the API: the operator sets sale_starts_at; before it a cart is
// answered 202 waiting_for_sale (with its secret and Location), holds nothing, and its GET
// answers the same; nothing of the SKU can be bought before the start, whatever the stock.
// At the start the early carts are judged in their drawn order: one gets the unit and waits
// in line, the other's GET answers 409 out_of_stock.
func TestADropSellsNothingBeforeItsStartAndThenServesItsDraw(t *testing.T) {
	h := newRoomHarness(t, 10, 1, 100, nil)
	ctx := t.Context()
	drop := h.stockSKU(t, "DROP-", 1, 500, 1, "usd")
	start := time.Now().Add(2 * time.Second).UTC().Truncate(time.Millisecond)
	put := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + drop, header: admin(), body: body(fmt.Sprintf(
		`{"on_hand": 1, "price_cents": 500, "currency": "usd", "max_per_order": 1, "sale_starts_at": %q}`, start.Format(time.RFC3339Nano)))})
	var inv shop.InventoryView
	decodeJSON(t, put, &inv)
	if put.Code != http.StatusOK || inv.SaleStartsAt == nil || !inv.SaleStartsAt.Equal(start) {
		t.Fatalf("PUT with sale_starts_at: %d %s", put.Code, put.Body)
	}
	// The room is otherwise empty: a cart with a free place would pass straight to its saga.
	if _, err := h.room.Forget(ctx, "blocker"); err != nil {
		t.Fatal(err)
	}
	post := func(cart string) api.QueuedView {
		t.Helper()
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
			body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":"u-%s","items":[{"sku":%q,"quantity":1}]}`, cart, cart, drop))})
		if rec.Code != http.StatusAccepted || rec.Header().Get("Location") != "/v1/checkouts/"+cart {
			t.Fatalf("POST %s before the start: %d %s", cart, rec.Code, rec.Body)
		}
		var v api.QueuedView
		decodeJSON(t, rec, &v)
		if v.Status != "waiting_for_sale" || v.SaleStartsAt == nil || !v.SaleStartsAt.Equal(start) || v.CheckoutSecret == "" || v.RefreshAfterMS < 1000 {
			t.Fatalf("POST %s before the start: %s, want waiting_for_sale until %s with a secret", cart, rec.Body, start)
		}
		return v
	}
	first, second := post("d-1"), post("d-2")
	if again := post("d-1"); again.CheckoutSecret != first.CheckoutSecret {
		t.Fatalf("retried POST before the start: %+v", again)
	}
	get := func(cart, secret string) *httptest.ResponseRecorder {
		return h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: withSecret(secret)})
	}
	var v api.QueuedView
	if rec := get("d-2", second.CheckoutSecret); rec.Code != http.StatusOK {
		t.Fatalf("GET before the start: %d %s", rec.Code, rec.Body)
	} else if decodeJSON(t, rec, &v); v.Status != "waiting_for_sale" {
		t.Fatalf("GET before the start: %s", rec.Body)
	}
	h.assertUntouched(t, drop, 1)

	// After the start, the first cart to come releases the drop (here: one of another SKU).
	testenv.Eventually(t, "the drop's start", func() bool { return time.Now().After(start.Add(100 * time.Millisecond)) })
	queued(t, h.post(t, "after", 1, ""), http.StatusAccepted)
	answers := map[string]int{}
	for cart, secret := range map[string]string{"d-1": first.CheckoutSecret, "d-2": second.CheckoutSecret} {
		rec := get(cart, secret)
		switch rec.Code {
		case http.StatusOK:
			decodeJSON(t, rec, &v)
			if v.Status != "queued" || v.Position != 1 {
				t.Errorf("GET %s after the start: %s, want queued first", cart, rec.Body)
			}
		case http.StatusConflict:
			problemOf(t, rec, http.StatusConflict, "out_of_stock")
		default:
			t.Errorf("GET %s after the start: %d %s", cart, rec.Code, rec.Body)
		}
		answers[fmt.Sprint(rec.Code)]++
	}
	if answers["200"] != 1 || answers["409"] != 1 {
		t.Fatalf("answers after the start: %v, want one cart in line and one refused (1 unit)", answers)
	}
	if after := queued(t, h.post(t, "after", 1, ""), http.StatusAccepted); after.Position != 2 {
		t.Fatalf("the cart that came after the start: place %d, want 2, behind the drop's", after.Position)
	}
}

// An operator who moves a SKU's start into the future stops the carts already in line for
// it: none is taken from the line before the start (it waits for it, answered
// waiting_for_sale), while the carts of other SKUs still are. (They were started at their
// turn and sold before the start.)
func TestMovingAStartIntoTheFutureStopsTheCartsInLine(t *testing.T) {
	h := newRoomHarness(t, 10, 1, 100, nil)
	queued(t, h.post(t, "c-in-line", 1, ""), http.StatusAccepted)
	start := time.Now().Add(time.Hour).UTC()
	put := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + h.sku, header: admin(), body: body(fmt.Sprintf(
		`{"on_hand": 10, "price_cents": 500, "currency": "usd", "max_per_order": 5, "sale_starts_at": %q}`, start.Format(time.RFC3339Nano)))})
	if put.Code != http.StatusOK {
		t.Fatalf("PUT with sale_starts_at: %d %s", put.Code, put.Body)
	}
	for range 2 { // the blocker and the cart behind it, both for the SKU
		if e, ok, err := h.room.Pop(t.Context()); err != nil || ok {
			t.Fatalf("took %s (%v) from the line before its SKU's start", e.CartID, err)
		}
	}
	place, err := h.room.Lookup(t.Context(), "c-in-line")
	if err != nil || place.State != shop.PlaceEarly {
		t.Fatalf("the cart in line: %+v %v, want it waiting for the sale", place, err)
	}
	h.assertUntouched(t, h.sku, 10)
}

// An operator who clears a SKU's start (a PUT without sale_starts_at) releases the carts that
// waited for it at once: the carts sent back from the line for the start are taken at the
// next turn, not at the old start.
func TestClearingAStartReleasesTheCartsWaitingForIt(t *testing.T) {
	h := newRoomHarness(t, 10, 1, 100, nil)
	queued(t, h.post(t, "c-in-line", 1, ""), http.StatusAccepted)
	put := func(startsAt string) {
		t.Helper()
		rec := h.do(t, request{method: http.MethodPut, path: "/v1/inventory/" + h.sku, header: admin(), body: body(
			`{"on_hand": 10, "price_cents": 500, "currency": "usd", "max_per_order": 5` + startsAt + `}`)})
		if rec.Code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", startsAt, rec.Code, rec.Body)
		}
	}
	put(fmt.Sprintf(`, "sale_starts_at": %q`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)))
	if e, ok, err := h.room.Pop(t.Context()); err != nil || ok {
		t.Fatalf("took %s (%v) from the line before its SKU's start", e.CartID, err)
	}
	put("")
	var took []string
	for {
		e, ok, err := h.room.Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		took = append(took, e.CartID)
	}
	if slices.Sort(took); !slices.Equal(took, []string{"blocker", "c-in-line"}) {
		t.Fatalf("took %v once the start was cleared, want the two carts that waited for it", took)
	}
}

package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
)

// cart renders a checkout request body; items are sku:quantity pairs. An empty customerID
// leaves customer_id out (an identity token names the customer).
func cart(cartID, customerID string, items ...any) string {
	var lines []map[string]any
	for i := 0; i+1 < len(items); i += 2 {
		lines = append(lines, map[string]any{"sku": items[i], "quantity": items[i+1]})
	}
	req := map[string]any{"cart_id": cartID, "customer_id": customerID, "items": lines}
	if customerID == "" {
		delete(req, "customer_id")
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// TestStartCheckoutRefusesBadInput sends carts that must be refused before any saga starts
// (the server has no Temporal client: reaching it would be a 500).
func TestStartCheckoutRefusesBadInput(t *testing.T) {
	h := newHarness(t, nil)
	phone := h.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	caseX := h.stockSKU(t, "CASE-", 10, 1500, 5, "usd")
	euro := h.stockSKU(t, "EURO-", 10, 1500, 5, "eur")
	missing := h.sku(t, "NOPE-")
	// A wrongly typed quantity is named with its item's index where the JSON decoder gives it
	// (Go 1.27 on), and as items.quantity where it does not (Go 1.26).
	firstQuantity, secondQuantity := "items[0].quantity", "items[1].quantity"
	if !decoderNamesIndexes() {
		firstQuantity, secondQuantity = "items.quantity", "items.quantity"
	}

	fiftyOne := make([]any, 0, 102)
	for i := range 51 {
		fiftyOne = append(fiftyOne, fmt.Sprintf("SKU-%d", i), 1)
	}
	withTimeout := func(seconds int) string {
		return fmt.Sprintf(`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":%q,"quantity":1}],"payment_timeout_seconds":%d}`, phone, seconds)
	}
	valid := cart("c-1", "u-1", phone, 1)
	tooBig := `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"` + phone + `","quantity":1}],"pad":"` +
		strings.Repeat("x", 65*1024) + `"}`

	tests := []struct {
		name   string
		body   string
		header map[string]string
		status int
		code   string
		field  string // "" when the input has no field to name
		// untouched are SKUs whose stock must still be whole afterwards.
		untouched []string
	}{
		{name: "malformed JSON", body: `{"cart_id": "c-1",`, status: 400, code: "invalid_json"},
		{name: "syntax error", body: `{"cart_id" "c-1"}`, status: 400, code: "invalid_json"},
		{name: "empty body", body: ``, status: 400, code: "invalid_json"},
		{name: "not an object", body: `[1,2]`, status: 400, code: "invalid_json"},
		{name: "two objects", body: valid + valid, status: 400, code: "invalid_json"},
		{name: "unknown field", body: `{"cart_id":"c-1","customer_id":"u-1","coupon":"FREE","items":[{"sku":"` + phone + `","quantity":1}]}`,
			status: 400, code: "invalid_json", field: "coupon"},
		{name: "unknown item field", body: `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"` + phone + `","qty":1}]}`,
			status: 400, code: "invalid_json", field: "qty"},
		{name: "quantity is a string", body: `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"` + phone + `","quantity":1},{"sku":"` + phone + `","quantity":"2"}]}`,
			status: 400, code: "invalid_json", field: secondQuantity},
		{name: "quantity is a fraction", body: `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"` + phone + `","quantity":1.5}]}`,
			status: 400, code: "invalid_json", field: firstQuantity},
		{name: "cart_id is a number", body: `{"cart_id":7,"customer_id":"u-1","items":[{"sku":"` + phone + `","quantity":1}]}`,
			status: 400, code: "invalid_json", field: "cart_id"},
		{name: "items is an object", body: `{"cart_id":"c-1","customer_id":"u-1","items":{}}`,
			status: 400, code: "invalid_json", field: "items"},
		{name: "missing cart_id", body: `{"customer_id":"u-1","items":[{"sku":"` + phone + `","quantity":1}]}`,
			status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id with a space", body: cart("c 1", "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id with a slash", body: cart("c/1", "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id not ASCII", body: cart("cé", "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id ..", body: cart("..", "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id .", body: cart(".", "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "cart_id of 65 characters", body: cart(strings.Repeat("c", 65), "u-1", phone, 1), status: 422, code: "invalid_request", field: "cart_id"},
		{name: "missing customer_id", body: `{"cart_id":"c-1","items":[{"sku":"` + phone + `","quantity":1}]}`,
			status: 422, code: "invalid_request", field: "customer_id"},
		{name: "bad customer_id", body: cart("c-1", "u:9", phone, 1), status: 422, code: "invalid_request", field: "customer_id"},
		{name: "missing items", body: `{"cart_id":"c-1","customer_id":"u-1"}`, status: 422, code: "invalid_request", field: "items"},
		{name: "empty items", body: `{"cart_id":"c-1","customer_id":"u-1","items":[]}`, status: 422, code: "invalid_request", field: "items"},
		{name: "51 lines", body: cart("c-1", "u-1", fiftyOne...), status: 422, code: "invalid_request", field: "items"},
		{name: "duplicate SKU lines", body: cart("c-1", "u-1", phone, 1, phone, 1), status: 422, code: "invalid_request", field: "items[1].sku"},
		{name: "bad SKU", body: cart("c-1", "u-1", phone, 1, "CASE X", 1), status: 422, code: "invalid_request", field: "items[1].sku"},
		{name: "quantity 0", body: cart("c-1", "u-1", phone, 0), status: 422, code: "invalid_request", field: "items[0].quantity"},
		{name: "quantity -1", body: cart("c-1", "u-1", phone, 1, caseX, -1), status: 422, code: "invalid_request", field: "items[1].quantity"},
		{name: "missing quantity", body: `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"` + phone + `"}]}`,
			status: 422, code: "invalid_request", field: "items[0].quantity"},
		{name: "payment timeout 0", body: withTimeout(0), status: 422, code: "invalid_request", field: "payment_timeout_seconds"},
		{name: "payment timeout negative", body: withTimeout(-5), status: 422, code: "invalid_request", field: "payment_timeout_seconds"},
		{name: "payment timeout 86401", body: withTimeout(86401), status: 422, code: "invalid_request", field: "payment_timeout_seconds"},
		{name: "payment timeout over the 1 h cap", body: withTimeout(3601), status: 422, code: "invalid_request", field: "payment_timeout_seconds"},
		{name: "Idempotency-Key of 300 characters", body: valid, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 300)},
			status: 422, code: "invalid_request", field: "Idempotency-Key"},
		{name: "Idempotency-Key with a space", body: valid, header: map[string]string{"Idempotency-Key": "key 1"},
			status: 422, code: "invalid_request", field: "Idempotency-Key"},
		{name: "Idempotency-Key with a control character", body: valid, header: map[string]string{"Idempotency-Key": "key\x7f"},
			status: 422, code: "invalid_request", field: "Idempotency-Key"},
		{name: "unknown SKU", body: cart("c-1", "u-1", phone, 1, missing, 1), status: 422, code: "unknown_sku", field: "items[1].sku",
			untouched: []string{phone}},
		{name: "quantity over max_per_order", body: cart("c-1", "u-1", caseX, 1, phone, 3), status: 422, code: "quantity_over_limit",
			field: "items[1].quantity", untouched: []string{phone, caseX}},
		{name: "mixed currency", body: cart("c-1", "u-1", phone, 1, euro, 1), status: 422, code: "mixed_currency", field: "items[1].sku",
			untouched: []string{phone, euro}},
		{name: "body over 64K", body: tooBig, status: 413, code: "body_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(tt.body), header: tt.header})
			p := problemOf(t, rec, tt.status, tt.code)
			if tt.field != "" {
				assertNames(t, p, tt.field)
			}
			if rec.Header().Get("Location") != "" {
				t.Errorf("a refused checkout has Location %q", rec.Header().Get("Location"))
			}
			for _, sku := range tt.untouched {
				h.assertUntouched(t, sku, 10)
			}
		})
	}
}

// TestStartCheckoutBodyLimitWithoutContentLength streams an oversized body with no
// Content-Length, so the limit is enforced while reading rather than from the header.
func TestStartCheckoutBodyLimitWithoutContentLength(t *testing.T) {
	h := newHarness(t, nil)
	big := `{"cart_id":"c-1","customer_id":"u-1","items":[],"pad":"` + strings.Repeat("x", 65*1024) + `"}`
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: io.MultiReader(strings.NewReader(big))})
	problemOf(t, rec, http.StatusRequestEntityTooLarge, "body_too_large")
}

// TestStartCheckoutReportsEveryBadField checks that one response names all bad fields.
// (It does not count them: with no Idempotency-Key header the key defaults to the bad
// cart_id and is reported as well; see the report on validateCheckout.)
func TestStartCheckoutReportsEveryBadField(t *testing.T) {
	h := newHarness(t, nil)
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
		body: body(`{"cart_id":"c 1","customer_id":"","items":[{"sku":"A","quantity":0}],"payment_timeout_seconds":0}`)})
	p := problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request")
	for _, f := range []string{"cart_id", "customer_id", "items[0].quantity", "payment_timeout_seconds"} {
		assertNames(t, p, f)
	}
}

func TestCheckoutByBadIDIsRefused(t *testing.T) {
	h := newHarness(t, nil)
	for _, tt := range []struct{ name, method, path string }{
		{"get with a space", http.MethodGet, "/v1/checkouts/c%201"},
		{"get with a bang", http.MethodGet, "/v1/checkouts/c!1"},
		{"get with an encoded slash", http.MethodGet, "/v1/checkouts/c%2F1"},
		{"get of 65 characters", http.MethodGet, "/v1/checkouts/" + strings.Repeat("c", 65)},
		{"cancel with a space", http.MethodPost, "/v1/checkouts/c%201/cancel"},
		{"cancel of 65 characters", http.MethodPost, "/v1/checkouts/" + strings.Repeat("c", 65) + "/cancel"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := h.do(t, request{method: tt.method, path: tt.path})
			p := problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request")
			assertNames(t, p, "cart_id")
		})
	}
}

// TestOverLimitIsRefusedBeforeTheSoldOutGate: a quantity over max_per_order is bad input
// (422) whatever the stock is, so the sold-out gate's 409 must not answer it first. Here the
// SKU has 1 unit and a limit of 2: the gate alone would call 3 units "out of stock".
func TestOverLimitIsRefusedBeforeTheSoldOutGate(t *testing.T) {
	h := newHarness(t, func(_ *api.Config, d *api.Deps) { d.Gate = lua.New(testenv.Redis(t)) })
	phone := h.stockSKU(t, "PHONE-", 1, 99900, 2, "usd")
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart("c-1", "u-1", phone, 3))})
	p := problemOf(t, rec, http.StatusUnprocessableEntity, "quantity_over_limit")
	assertNames(t, p, "items[0].quantity")
	h.assertUntouched(t, phone, 1)
}

// decoderNamesIndexes says whether this Go's encoding/json puts an element's index in the
// path of a type error.
func decoderNamesIndexes() bool {
	var v struct{ Items []struct{ Q int } }
	var typeErr *json.UnmarshalTypeError
	return errors.As(json.Unmarshal([]byte(`{"Items":[{"Q":"x"}]}`), &v), &typeErr) && strings.Contains(typeErr.Field, ".0.")
}

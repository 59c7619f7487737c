package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// A confirmed cart retried after its SKU sold out, once Redis no longer has its markers (the
// hold-end tombstone is swept after a week, both are lost with Redis's data), answers its
// end, not the sold-out gate's 409.
func TestARetriedConfirmedCartAnswersItsEndAfterRedisForgotIt(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	ctx := t.Context()
	id := "c-retry-" + testenv.RandomID("")
	timeout := int64(600)
	body, _ := json.Marshal(api.CheckoutRequest{CartID: id, CustomerID: "u-" + id,
		Items: []api.RequestItem{{SKU: s.sku, Quantity: 1}}, PaymentTimeoutSeconds: &timeout})
	if code, out := s.post(t, s.api, "/v1/checkouts", body, nil); code != http.StatusCreated {
		t.Fatalf("POST: %d %v", code, out)
	}
	pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice))
	eventually(t, "confirmed", func() (bool, string) {
		st, _ := s.pgStatus(t, id)
		return st == string(shop.StatusConfirmed), st
	})
	// The SKU sells out, and Redis forgets the cart.
	rdb := testenv.Redis(t)
	level, err := lua.New(rdb).Level(ctx, s.sku)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.inv.Adjust(ctx, shop.Adjustment{SKU: s.sku, Delta: -level.Available, Reason: "sold out elsewhere", IdempotencyKey: "sellout-" + id}); err != nil {
		t.Fatal(err)
	}
	rdb.HDel(ctx, lua.HoldEndsKey(s.sku), id)
	rdb.Del(ctx, lua.StartedKey(id))

	// Once the gate refuses a new buyer of the SKU, the confirmed cart is retried.
	other, _ := json.Marshal(api.CheckoutRequest{CartID: id + "-other", CustomerID: "u-other-" + id,
		Items: []api.RequestItem{{SKU: s.sku, Quantity: 1}}, PaymentTimeoutSeconds: &timeout})
	eventually(t, "the gate refusing a new buyer", func() (bool, string) {
		code, out := s.post(t, s.api, "/v1/checkouts", other, nil)
		return code == http.StatusConflict, fmt.Sprint(code, out)
	})
	if code, out := s.post(t, s.api, "/v1/checkouts", body, nil); code != http.StatusOK || out["status"] != string(shop.StatusConfirmed) {
		t.Fatalf("retried POST of the confirmed cart: %d %v, want 200 confirmed", code, out)
	}
}

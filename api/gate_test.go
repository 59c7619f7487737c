package api_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// A crowd of new carts for a sold-out SKU is refused 409 without a saga, while a retried POST
// of a cart Postgres recorded, sent among them (its Redis markers gone), reaches its saga:
// the carts the gate refuses at the same moment share Postgres's answer, and each gets its
// own. The mock fails the test on any Temporal call but the recorded cart's.
func TestTheGateLetsARecordedCartInACrowdReachItsSaga(t *testing.T) {
	tc := mocks.NewClient(t)
	m := &mockedTemporal{tc: tc, harness: newHarness(t, func(_ *api.Config, d *api.Deps) {
		d.Temporal = tc
		d.Gate = lua.New(testenv.Redis(t))
	})}
	sku := m.stockSKU(t, "GATE-", 0, 500, 5, "usd")
	recorded := testenv.RandomID("cart-")
	hash := api.RequestHash(api.CheckoutRequest{CartID: recorded, CustomerID: "u-1", Items: []api.RequestItem{{SKU: sku, Quantity: 1}}}, 900)
	if _, err := store.New(m.pool).InsertCheckout(t.Context(), shop.CheckoutRecord{CheckoutID: recorded, CustomerID: "u-1",
		Currency: "usd", AmountCents: 500, Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 500}},
		Fingerprint: shop.Fingerprint{RequestHash: hash, IdempotencyKey: recorded}}, nil); err != nil {
		t.Fatal(err)
	}
	m.reserved(t, recorded, false, recorded)

	const crowd = 40
	answers := make([]*httptest.ResponseRecorder, crowd)
	carts := make([]string, crowd)
	var wg sync.WaitGroup
	for i := range crowd {
		carts[i] = testenv.RandomID("cart-")
		if i == crowd/2 {
			carts[i] = recorded
		}
		wg.Go(func() { answers[i] = m.postCart(t, carts[i], sku, "") })
	}
	wg.Wait()
	for i, rec := range answers {
		if carts[i] == recorded {
			if v := checkoutView(t, rec, http.StatusOK); v.Status != shop.StatusAwaitingPayment {
				t.Errorf("the recorded cart: %s, want its saga's %s", v.Status, shop.StatusAwaitingPayment)
			}
			continue
		}
		problemOf(t, rec, http.StatusConflict, "out_of_stock")
	}
}

package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// Whatever a run of a saga ends with, the API answers what Postgres records: a run that
// support reset to before its confirm closes payment_failed while Postgres holds the
// checkout confirmed, and GET answers confirmed. A run whose checkout Postgres has no other
// end for is answered from its result.
func TestAFinishedCheckoutAnswersTheEndPostgresRecorded(t *testing.T) {
	finished := func(m *mockedTemporal, cart string, run shop.Status) {
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).
			Return(&client.QueryWorkflowWithOptionsResponse{QueryRejected: &querypb.QueryRejected{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}, nil).Once()
		m.finishedWith(t, cart, viewOf(cart, run))
	}
	t.Run("postgres holds another end: postgres", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		if _, err := store.New(m.pool).RecordEnd(t.Context(), shop.CheckoutRecord{CheckoutID: cart, CustomerID: "u-1",
			Status: string(shop.StatusConfirmed), Currency: "usd", AmountCents: 500}); err != nil {
			t.Fatal(err)
		}
		finished(m, cart, shop.StatusPaymentFailed)
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusConfirmed {
			t.Errorf("answer = %s, want the confirmed end Postgres records", v.Status)
		}
	})
	t.Run("postgres has no end: the run's result", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		finished(m, cart, shop.StatusExpired)
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusExpired {
			t.Errorf("answer = %s, want the run's expired", v.Status)
		}
	})
}

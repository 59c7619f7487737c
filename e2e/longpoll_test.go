package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// longPollSubtests runs a buyer's GET ?wait against the webhook test's stack.
func longPollSubtests(t *testing.T, s *payStack) {
	// GET ?wait long-polls the outcome. A GET sent before the payment is still waiting a
	// second later (a plain GET answers in milliseconds) and answers confirmed once the
	// webhook's payment confirms the checkout; one of a checkout nobody pays answers its
	// current state once the wait is over, not before.
	t.Run("GET with wait answers the outcome once it is decided", func(t *testing.T) {
		id := testenv.RandomID("wait-")
		s.openCheckout(t, id, 600)
		type answer struct {
			v   api.CheckoutView
			err error
		}
		waitGET := func(id string, seconds int) answer {
			resp, err := s.buyerGet(t.Context(), id, fmt.Sprintf("?wait=%d", seconds))
			if err != nil {
				return answer{err: err}
			}
			defer resp.Body.Close()
			var a answer
			if a.err = json.NewDecoder(resp.Body).Decode(&a.v); a.err == nil && resp.StatusCode != http.StatusOK {
				a.err = fmt.Errorf("status %d", resp.StatusCode)
			}
			return a
		}
		got := make(chan answer, 1)
		go func() { got <- waitGET(id, api.MaxWaitSeconds) }()
		select {
		case a := <-got:
			t.Fatalf("GET ?wait answered %s (%v) before the checkout was paid", a.v.Status, a.err)
		case <-time.After(time.Second):
		}
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		if code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice)); code != http.StatusOK {
			t.Fatalf("webhook: %d %s", code, status)
		}
		a := <-got
		for i := 0; a.err == nil && !a.v.Status.Final() && i < 3; i++ { // a slow machine: wait again
			a = waitGET(id, api.MaxWaitSeconds)
		}
		if a.err != nil || a.v.Status != shop.StatusConfirmed || a.v.OrderID == nil {
			t.Errorf("GET ?wait after the payment: %+v (%v), want confirmed with its order", a.v, a.err)
		}

		unpaid := testenv.RandomID("wait-")
		s.openCheckout(t, unpaid, 600)
		sent := time.Now()
		if a := waitGET(unpaid, 1); a.err != nil || a.v.Status != shop.StatusAwaitingPayment || time.Since(sent) < time.Second {
			t.Errorf("GET ?wait=1 of an unpaid checkout: %s (%v) after %s, want awaiting_payment after the full second",
				a.v.Status, a.err, time.Since(sent))
		}
		if code, _ := s.post(t, s.api, "/v1/checkouts/"+unpaid+"/cancel", nil, buyer(unpaid)); code != http.StatusOK {
			t.Errorf("cancel %s: %d", unpaid, code)
		}
	})
}

package api_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// A JSON endpoint refuses a body sent as anything but application/json with 415, before it
// reads a byte of it: text/plain, a form and a multipart body are what a web page may make
// its visitors' browsers send to another site without asking (a CORS "simple" request), so
// a refusal forces that page through a preflight the API never grants. The harness has no
// Temporal client: a request that got past the check would answer 500.
func TestJSONEndpointsRefuseABodyThatIsNotJSON(t *testing.T) {
	h := newHarness(t, nil)
	phone := h.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	routes := []struct {
		name, method, path, body string
		header                   map[string]string
	}{
		{"start", http.MethodPost, "/v1/checkouts", cart("c-1", "u-1", phone, 1), nil},
		{"cancel", http.MethodPost, "/v1/checkouts/c-1/cancel", `{}`, nil},
		{"set stock", http.MethodPut, "/v1/inventory/" + phone, `{"on_hand":0,"price_cents":1,"currency":"usd","max_per_order":1}`, bearer(testAdminToken)},
		{"adjust stock", http.MethodPost, "/v1/inventory/" + phone + "/adjustments", `{"delta":-10,"reason":"x"}`, bearer(testAdminToken)},
		{"extend", http.MethodPost, "/v1/admin/checkouts/c-1/extend", `{"seconds":60}`, bearer(testAdminToken)},
		{"support cancel", http.MethodPost, "/v1/admin/checkouts/c-1/cancel", `{}`, bearer(testAdminToken)},
		{"support retry", http.MethodPost, "/v1/admin/checkouts/c-1/retry", `{}`, bearer(testAdminToken)},
		{"acknowledge", http.MethodPost, "/v1/admin/checkouts/c-1/acknowledge", `{}`, bearer(testAdminToken)},
		{"retry refund", http.MethodPost, "/v1/admin/refunds/stripe/pi_1/retry", `{}`, bearer(testAdminToken)},
	}
	for _, rt := range routes {
		for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", "application/javascript", "application/jsonx", "none"} {
			t.Run(rt.name+" as "+ct, func(t *testing.T) {
				header := map[string]string{echo.HeaderContentType: ct}
				if ct == "none" {
					header[echo.HeaderContentType] = ""
				}
				for k, v := range rt.header {
					header[k] = v
				}
				rec := h.do(t, request{method: rt.method, path: rt.path, body: body(rt.body), header: header})
				problemOf(t, rec, http.StatusUnsupportedMediaType, "unsupported_media_type")
			})
		}
	}
	h.assertUntouched(t, phone, 10)

	// application/json with parameters, in any case, is JSON: the request goes on to be
	// judged (here, a cart whose only line has quantity 0).
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		t.Run("start as "+ct, func(t *testing.T) {
			rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart("c-1", "u-1", phone, 0)),
				header: map[string]string{echo.HeaderContentType: ct}})
			problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request")
		})
	}
	// The webhooks verify the raw body against its signature, whatever it is labelled.
	t.Run("stripe webhook as text/plain", func(t *testing.T) {
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/webhooks/stripe", body: body(`{"id":"evt_1"}`),
			header: map[string]string{echo.HeaderContentType: "text/plain", "Stripe-Signature": "t=1,v1=00"}})
		problemOf(t, rec, http.StatusBadRequest, "invalid_signature")
	})
}

// A POST without a body needs no Content-Type: a buyer's cancel is one bare POST.
func TestCancelWithoutABodyNeedsNoContentType(t *testing.T) {
	m := newMockedTemporal(t)
	cart := testenv.RandomID("cart-")
	handle := mocks.NewWorkflowUpdateHandle(t)
	handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*shop.View) = viewOf(cart, shop.StatusCancelled)
	}).Return(nil).Once()
	m.tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
		return o.WorkflowID == shop.WorkflowID(cart) && o.UpdateName == "cancel"
	})).Return(handle, nil).Once()
	rec := m.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + cart + "/cancel", header: buyerOf(cart)})
	if v := checkoutView(t, rec, http.StatusOK); v.Status != shop.StatusCancelled {
		t.Errorf("answer = %+v, want cancelled", v)
	}
}

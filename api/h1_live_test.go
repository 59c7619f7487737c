package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// H1 on a real stack in browser mode, for the two ends the live test of a running and a
// terminated saga does not reach: (b) a checkout whose history Temporal no longer has, and
// (c) a cart cancelled while it waited in line. Another customer's POST of its id is 409
// checkout_exists with nothing of the checkout; its creator's retry still gets the view and
// a secret that opens it.

// tokenOf is the Authorization header of customer's login token.
func tokenOf(t *testing.T, customer string) map[string]string {
	return map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customer)}
}

// refusedToOther asserts that rec is 409 checkout_exists and shows nothing of owner's checkout.
func refusedToOther(t *testing.T, when, owner string, code int, answer string) {
	t.Helper()
	if code != http.StatusConflict || !strings.Contains(answer, `"checkout_exists"`) || strings.Contains(answer, owner) || strings.Contains(answer, "checkout_secret") {
		t.Errorf("%s: another customer's POST: %d %s; want 409 checkout_exists and nothing of %s's", when, code, answer, owner)
	}
}

// (b) The history of an ended checkout is gone, as Temporal's retention drops it (deleted
// here through the SDK's DeleteWorkflowExecution, as retention does): Postgres's record and
// its creator's fingerprint are all that is left to judge a POST of its id.
func TestAnotherCustomersPostOfACheckoutWhoseHistoryIsGoneIsRefused(t *testing.T) {
	l := newLive(t, nil, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	l.startWorker(t)
	sku := l.stockSKU(t, "GONE-", 10, 99900, 2, "usd")
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	id := testenv.RandomID("c-")
	first := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(id, "", sku, 1)), header: tokenOf(t, alice)})
	secret := secretOf(t, first)
	if first.Code != http.StatusCreated || secret == "" {
		t.Fatalf("alice's cart: %d %s; want 201 with a secret", first.Code, first.Body)
	}
	cancel := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + id + "/cancel", body: body(`{}`), header: withSecret(secret)})
	if v := checkoutView(t, cancel, http.StatusOK); v.Status != shop.StatusCancelled {
		t.Fatalf("alice's cancel: %+v, want cancelled", v)
	}
	l.forget(t, id)

	code, answer := l.post(t, cart(id, "", sku, 1), tokenOf(t, bob))
	refusedToOther(t, "its history gone", alice, code, answer)
	if l.sagaExists(t, id) {
		t.Errorf("bob's refused POST started a saga of alice's cart")
	}
	mine := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(id, "", sku, 1)), header: tokenOf(t, alice)})
	v := checkoutView(t, mine, http.StatusOK)
	if v.Status != shop.StatusCancelled || v.CustomerID != alice || v.CheckoutSecret != secret {
		t.Fatalf("alice's retry with her history gone: %+v; want her cancelled checkout and her secret", v)
	}
	if got := checkoutView(t, l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + id, header: withSecret(v.CheckoutSecret)}), http.StatusOK); got.Status != shop.StatusCancelled {
		t.Errorf("GET with the secret of her retry: %+v, want cancelled", got)
	}
}

// forget deletes the closed saga of cartID and waits until Temporal no longer knows it. The
// server deletes it once its visibility queue has acknowledged the close, and it writes that
// acknowledgement every 30 s, with 15 % jitter (history.visibilityProcessorUpdateAckInterval):
// about 30 s here, so the deadline is well past that.
func (l *live) forget(t *testing.T, cartID string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var err error
	for l.sagaExists(t, cartID) {
		if time.Now().After(deadline) {
			t.Fatalf("the saga of %s is still there 2 minutes after its deletion (last error: %v)", cartID, err)
		}
		// Deletion is asynchronous; asking again is harmless.
		_, err = l.tc.WorkflowService().DeleteWorkflowExecution(t.Context(), &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: shop.WorkflowID(cartID)},
		})
		time.Sleep(100 * time.Millisecond)
	}
}

// (c) A cart cancelled while it waited in line never had a saga: its end is in Postgres
// only. Another customer's POST is refused at the door; its creator's retry starts a saga on
// the real server, which adopts the recorded end and answers with the creator's fingerprint.
func TestAnotherCustomersPostOfACartCancelledInLineIsRefusedOnARealServer(t *testing.T) {
	srv, _ := testenv.DevServerWith(t, testenv.DevServerOptions{ExtraArgs: workflows.DevServerFlags()})
	tc := srv.Client()
	h := browserRoom(t, tc)
	w := worker.New(tc, &activities.Activities{Store: h.inv.Store, Stock: h.inv.Stock, Temporal: tc}, worker.Build{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	id := testenv.RandomID("c-")
	v := queued(t, h.postFor(t, alice, id, 1), http.StatusAccepted)
	cancel := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + id + "/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	if got := checkoutView(t, cancel, http.StatusOK); got.Status != shop.StatusCancelled {
		t.Fatalf("alice's cancel in line: %+v, want cancelled", got)
	}
	rec := h.postFor(t, bob, id, 1)
	refusedToOther(t, "cancelled in line", alice, rec.Code, rec.Body.String())
	mine := checkoutView(t, h.postFor(t, alice, id, 1), http.StatusOK)
	if mine.Status != shop.StatusCancelled || mine.CustomerID != alice || mine.CheckoutSecret != v.CheckoutSecret {
		t.Fatalf("alice's retry after her cancel in line: %+v; want her cancelled checkout and her secret", mine)
	}
	// Bob again, now that a saga of the cart ran (adopting the end) and closed.
	rec = h.postFor(t, bob, id, 1)
	refusedToOther(t, "cancelled in line, after the creator's retry ran a saga", alice, rec.Code, rec.Body.String())
	if got := checkoutView(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + id, header: withSecret(mine.CheckoutSecret)}), http.StatusOK); got.Status != shop.StatusCancelled {
		t.Errorf("GET with the secret of her retry: %+v, want cancelled", got)
	}
}

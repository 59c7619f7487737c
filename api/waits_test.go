package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// heldPolls makes the saga of each cart a long poll that Temporal holds until release is
// closed or the waiter gives up: each poll entered is sent on entered. Past the wait, the
// status query answers awaiting_payment.
func heldPolls(t *testing.T, tc *mocks.Client, entered chan<- string, release <-chan struct{}, carts ...string) {
	for _, cart := range carts {
		longPolls(t, tc, cart, func(ctx context.Context) {
			entered <- cart
			holdUntil(ctx, release)
		})
		awaitingPayment(t, tc, cart)
	}
}

// longPolls makes each long poll of cart's saga run poll with the poll's context, and then
// end without a result, as Temporal's does when its wait runs out.
func longPolls(t *testing.T, tc *mocks.Client, cart string, poll func(ctx context.Context)) {
	run := mocks.NewWorkflowRun(t)
	run.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		poll(args.Get(0).(context.Context))
	}).Return(context.DeadlineExceeded).Maybe()
	tc.On("GetWorkflow", mock.Anything, shop.WorkflowID(cart), "").Return(run).Maybe()
}

// holdUntil returns once release is closed or ctx ends.
func holdUntil(ctx context.Context, release <-chan struct{}) {
	select {
	case <-release:
	case <-ctx.Done():
	}
}

// awaitingPayment makes the status query of cart answer awaiting_payment, as often as asked.
func awaitingPayment(t *testing.T, tc *mocks.Client, cart string) {
	result := mocks.NewEncodedValue(t)
	result.On("Get", mock.Anything).Run(func(args mock.Arguments) { *args.Get(0).(*shop.View) = viewOf(cart, shop.StatusAwaitingPayment) }).Return(nil).Maybe()
	tc.On("QueryWorkflowWithOptions", mock.Anything, mock.MatchedBy(func(r *client.QueryWorkflowWithOptionsRequest) bool {
		return r.WorkflowID == shop.WorkflowID(cart)
	})).Return(&client.QueryWorkflowWithOptionsResponse{QueryResult: result}, nil).Maybe()
}

// waitFrom is a buyer's GET ?wait=10 of cart from addr.
func (h *harness) waitFrom(addr, cart string) *httptest.ResponseRecorder {
	return h.serveFrom(addr, buyerGet(cart, "?wait=10"))
}

// Concurrent waits are bounded per address (an IPv6 /64 is one) and per process: a wait
// past either bound is answered at once with the current state, as wait=0, and holds no
// long poll. Here 2 per address and 3 in all: the third wait of one /64 and the fourth of
// the process never reach Temporal's long poll (a poll entered would show on entered), yet
// answer 200 with the view while the others still wait.
func TestWaitsPastTheirBoundAnswerAtOnce(t *testing.T) {
	tc := mocks.NewClient(t)
	h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.MaxWaitsPerAddress, cfg.MaxWaits = 2, 3
		d.Temporal = tc
	})
	run := testenv.RandomID("")
	cart := func(i int) string { return fmt.Sprintf("w-%s-%d", run, i) }
	entered, release := make(chan string, 10), make(chan struct{})
	heldPolls(t, tc, entered, release, cart(1), cart(2), cart(3))
	for i := 4; i <= 5; i++ {
		awaitingPayment(t, tc, cart(i))
	}

	var held sync.WaitGroup
	hold := func(addr, cart string) {
		held.Add(1)
		go func() {
			defer held.Done()
			if rec := h.waitFrom(addr, cart); rec.Code != http.StatusOK {
				t.Errorf("held wait for %s: %d %s", cart, rec.Code, rec.Body)
			}
		}()
		<-entered
	}
	hold("[2001:db8:1:1::1]:40000", cart(1))
	hold("[2001:db8:1:1::2]:40000", cart(2))
	// The same /64's third wait: answered at once, without a poll.
	if v := checkoutView(t, h.waitFrom("[2001:db8:1:1::3]:40000", cart(4)), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
		t.Errorf("a wait past the address's bound: %+v, want the current view", v)
	}
	hold("198.51.100.1:40000", cart(3)) // another address: the process's third
	if v := checkoutView(t, h.waitFrom("198.51.100.2:40000", cart(5)), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
		t.Errorf("a wait past the process's bound: %+v, want the current view", v)
	}
	select {
	case c := <-entered:
		t.Errorf("a wait past a bound entered a long poll (%s)", c)
	default:
	}
	close(release)
	held.Wait()
	// Once the waits are answered their places are free again.
	again := make(chan string, 1)
	heldPolls(t, tc, again, release, cart(6))
	checkoutView(t, h.waitFrom("[2001:db8:1:1::3]:40000", cart(6)), http.StatusOK)
	select {
	case <-again:
	default:
		t.Errorf("a wait after the others were answered did not wait")
	}
}

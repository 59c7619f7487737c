package workflows_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// ReconcilePayments runs on a test environment of its own, as its schedule runs it beside the
// sagas, with the real activities over the sagas' Postgres and the local Stripe API. A
// time-skipping environment has no Temporal server behind it, so the test answers the two
// calls only a server can: the visibility queries list the sagas the test names, and each
// payment signalled to a saga is handed back to the test, which delivers it to that saga's
// environment as the server would.

// paymentsFixture is newRealFixture with the Stripe provider on a local Stripe API.
func paymentsFixture(t *testing.T) (*fixture, *stripetest.Server) {
	f := newRealFixture(t)
	stripe := stripetest.New(t)
	f.acts.Payments = map[string]payments.Provider{"stripe": payments.NewStripe(stripe.Key(), payments.WithStripeAPIURL(stripe.URL()))}
	return f, stripe
}

// over is a new test environment over f's Postgres, Redis and payment providers: another
// workflow of the same product. Every workflow runs for real.
func (f *fixture) over(t *testing.T) *fixture {
	g := newFixtureOn(t, f.pool, f.stock)
	g.acts.Payments = f.acts.Payments
	return g
}

// signalled is a payment ReconcilePayments signalled to a saga.
type signalled struct {
	workflowID string
	payment    shop.Payment
}

// reconcile runs one ReconcilePayments over f's Postgres and providers at f's current time.
// awaiting are the sagas its query for checkouts near their deadline finds, endedUnpaid those
// its query for checkouts that closed unpaid finds. It returns the run's result and the
// payments it signalled.
func (f *fixture) reconcile(t *testing.T, awaiting, endedUnpaid []string) (workflows.ReconcileResult, []signalled) {
	t.Helper()
	r := f.over(t)
	r.env.SetStartTime(f.env.Now())
	r.env.OnActivity(r.acts.ListWorkflowPage, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in steps.ListWorkflowPageInput) (steps.WorkflowPage, error) {
			switch {
			case strings.Contains(in.Query, "ExecutionStatus = 'Running'"):
				return steps.WorkflowPage{IDs: awaiting}, nil
			case strings.Contains(in.Query, "ExecutionStatus = 'Completed'"):
				return steps.WorkflowPage{IDs: endedUnpaid}, nil
			}
			t.Errorf("reconciliation asked visibility %q, which this test does not answer", in.Query)
			return steps.WorkflowPage{}, nil
		})
	var mu sync.Mutex
	var sent []signalled
	r.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, workflows.SignalPayment, mock.Anything).Return(
		func(_, workflowID, _, _ string, arg any) error {
			p, ok := arg.(shop.Payment)
			if !ok {
				t.Errorf("reconciliation signalled %T to %s, want a shop.Payment", arg, workflowID)
			}
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, signalled{workflowID: workflowID, payment: p})
			return nil
		})
	r.env.ExecuteWorkflow(workflows.ReconcilePayments, workflows.ReconcileInput{WithinSeconds: 300})
	var res workflows.ReconcileResult
	if err := r.env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("ReconcilePayments: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return res, sent
}

// reconcileAt runs reconcile at d into the saga f runs, for that saga alone, and delivers
// what it signals to the saga.
func (f *fixture) reconcileAt(t *testing.T, d time.Duration, checkoutID string) *workflows.ReconcileResult {
	var res workflows.ReconcileResult
	f.env.RegisterDelayedCallback(func() {
		var sent []signalled
		res, sent = f.reconcile(t, []string{shop.WorkflowID(checkoutID)}, nil)
		for _, s := range sent {
			if s.workflowID != shop.WorkflowID(checkoutID) {
				t.Errorf("reconciliation signalled %s, want only %s", s.workflowID, shop.WorkflowID(checkoutID))
				continue
			}
			f.signalPayment(false, s.payment)
		}
	}, d)
	return &res
}

// refundRows counts the refunds Postgres records for a payment.
func (f *fixture) refundRows(t *testing.T, paymentRef string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM refunds WHERE payment_ref = $1`, paymentRef).Scan(&n); err != nil {
		t.Fatalf("count refunds of %s: %v", paymentRef, err)
	}
	return n
}

// sweepOrphanOf records the payment of checkoutID's full amount as a webhook that came two
// hours before its checkout, and runs the orphan sweep, which refunds it. It returns the
// payment.
func sweepOrphanOf(t *testing.T, f *fixture, stripe *stripetest.Server, checkoutID string, cents int64) shop.Payment {
	t.Helper()
	pi := stripe.AddIntent(checkoutID, "succeeded", cents, "usd")
	p := shop.Payment{Provider: "stripe", EventID: "evt_" + pi, Outcome: shop.PaymentSucceeded, PaymentRef: pi, AmountCents: cents, Currency: "usd"}
	f.orphanPayment(checkoutID, p, "2 hours")
	f.env.ExecuteWorkflow(workflows.RefundOrphans, workflows.RefundOrphansInput{})
	var swept workflows.RefundOrphansResult
	if err := f.env.GetWorkflowResult(&swept); err != nil || swept.Refunded != 1 {
		t.Fatalf("orphan sweep: %+v, %v; want the one orphan refunded", swept, err)
	}
	return p
}

// A webhook came before its checkout existed; no checkout came within the hour, so the
// orphan sweep refunded the payment. Then the cart is posted after all (a client that retried
// late). Stripe keeps a refunded PaymentIntent at status succeeded, so reconciliation near the
// checkout's deadline finds it: it must not hand it to the saga. The payment ends as its one
// refund, and no order.
func TestReconciliationNeverConfirmsAPaymentTheOrphanSweepRefunded(t *testing.T) {
	sweep, stripe := paymentsFixture(t)
	in := input(shop.Item{SKU: sweep.sku(10, 99_900, 2), Quantity: 1})
	p := sweepOrphanOf(t, sweep, stripe, in.CheckoutID, 99_900)
	if refunds := stripe.Refunds(); len(refunds) != 1 || refunds[0].PaymentIntent != p.PaymentRef {
		t.Fatalf("stripe refunds after the sweep: %+v, want one of %s", refunds, p.PaymentRef)
	}

	saga := sweep.over(t)
	res := saga.reconcileAt(t, time.Duration(in.PaymentTimeoutSeconds)*time.Second-4*time.Minute, in.CheckoutID)
	v := saga.run(in)

	if v.Status != shop.StatusExpired || saga.orders(in.CheckoutID) != 0 {
		t.Errorf("checkout ended %s with %d orders, want expired with none: the payment was refunded", v.Status, saga.orders(in.CheckoutID))
	}
	if res.Checked != 1 || res.Delivered != 0 {
		t.Errorf("reconciliation %+v, want 1 checkout checked and nothing delivered", *res)
	}
	if refunds := stripe.Refunds(); len(refunds) != 1 {
		t.Errorf("stripe refunds %+v, want the sweep's one", refunds)
	}
	if n := saga.refundRows(t, p.PaymentRef); n != 1 {
		t.Errorf("postgres records %d refunds of %s, want 1", n, p.PaymentRef)
	}
}

// The sweep's refund may not have reached Stripe yet: here Stripe refused it (the charge is
// disputed) and it waits for support, so Stripe shows nothing refunded. The payment is still
// the sweep's to give back, as Postgres records (the sweep's claim of the orphan): a checkout
// posted late must not take it through reconciliation either, or support's retry of the
// refund would leave an order and a refund.
func TestReconciliationLeavesAPaymentTheOrphanSweepIsRefundingAlone(t *testing.T) {
	sweep, stripe := paymentsFixture(t)
	stripe.FailNextRefunds(stripetest.Answer{Status: 400, ErrType: "invalid_request_error", Code: "charge_disputed",
		Message: "Charge ch_1 has been charged back; cannot issue a refund."})
	sweep.env.SetDetachedChildWait(false) // the refund waits for support beyond this test
	in := input(shop.Item{SKU: sweep.sku(10, 99_900, 2), Quantity: 1})
	p := sweepOrphanOf(t, sweep, stripe, in.CheckoutID, 99_900)
	if refunds := stripe.Refunds(); len(refunds) != 0 {
		t.Fatalf("stripe refunds after the refused sweep: %+v, want none", refunds)
	}

	saga := sweep.over(t)
	res := saga.reconcileAt(t, time.Duration(in.PaymentTimeoutSeconds)*time.Second-4*time.Minute, in.CheckoutID)
	v := saga.run(in)

	if v.Status != shop.StatusExpired || saga.orders(in.CheckoutID) != 0 {
		t.Errorf("checkout ended %s with %d orders, want expired with none: the payment %s is being refunded",
			v.Status, saga.orders(in.CheckoutID), p.PaymentRef)
	}
	if res.Checked != 1 || res.Delivered != 0 {
		t.Errorf("reconciliation %+v, want 1 checkout checked and nothing delivered", *res)
	}
}

// Temporal and Postgres can disagree on how a checkout ended: a support reset of a confirmed
// saga to before its payment, without reapplying signals, runs again, expires and closes as
// expired, while Postgres keeps the order (the first end recorded stays). Reconciliation
// lists it among the checkouts that ended unpaid; it must not refund the payment of the order
// that stands. Another payment of the checkout is still money kept without an order: that
// one is refunded.
func TestReconciliationNeverRefundsThePaymentOfAnOrder(t *testing.T) {
	f, stripe := paymentsFixture(t)
	in := input(shop.Item{SKU: f.sku(10, 99_900, 2), Quantity: 1})
	paidBy := stripe.AddIntent(in.CheckoutID, "succeeded", 99_900, "usd")
	f.payAt(5*time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_" + paidBy, Outcome: shop.PaymentSucceeded,
		PaymentRef: paidBy, AmountCents: 99_900, Currency: "usd"})
	if v := f.run(in); v.Status != shop.StatusConfirmed {
		t.Fatalf("checkout ended %s, want confirmed", v.Status)
	}
	second := stripe.AddIntent(in.CheckoutID, "succeeded", 99_900, "usd") // its webhook was lost

	res, sent := f.reconcile(t, nil, []string{shop.WorkflowID(in.CheckoutID)})

	var refunded []string
	for _, r := range stripe.Refunds() {
		refunded = append(refunded, r.PaymentIntent)
	}
	if len(refunded) != 1 || refunded[0] != second {
		t.Errorf("stripe refunded %v, want only %s: %s paid the order", refunded, second, paidBy)
	}
	if f.orders(in.CheckoutID) != 1 || f.refundRows(t, paidBy) != 0 {
		t.Errorf("%d orders and %d refunds of %s, want the order and no refund", f.orders(in.CheckoutID), f.refundRows(t, paidBy), paidBy)
	}
	if res.EndedChecked != 1 || res.Refunded != 1 || len(sent) != 0 {
		t.Errorf("reconciliation %+v signalled %v, want 1 ended checkout checked, 1 refund started, nothing signalled", res, sent)
	}
}

package e2e

import (
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// reconciliationSubtests runs ReconcilePayments against the webhook test's stack, once the
// cases left nothing awaiting payment.
func reconciliationSubtests(t *testing.T, s *payStack) {
	// Visibility lags the saga a little: wait until the reconciliation's query sees it.
	awaitVisible := func(t *testing.T, id string) {
		query := fmt.Sprintf("WorkflowId = '%s' AND CheckoutState = '%s'", shop.WorkflowID(id), shop.StatusAwaitingPayment)
		eventually(t, "visible as awaiting_payment", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			return err == nil && len(resp.GetExecutions()) == 1, fmt.Sprint(err)
		})
	}
	reconcileIn := func(t *testing.T, in workflows.ReconcileInput) workflows.ReconcileResult {
		in.WithinSeconds = 2 * workflows.MaxPaymentTimeoutSeconds
		run, err := s.temporal.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
			ID: testenv.RandomID("reconcile-"), TaskQueue: workflows.TaskQueue,
		}, workflows.ReconcilePayments, in)
		if err != nil {
			t.Fatalf("start reconciliation: %v", err)
		}
		var res workflows.ReconcileResult
		if err := run.Get(t.Context(), &res); err != nil { // follows the run's continue-as-new chain
			t.Fatalf("reconciliation: %v", err)
		}
		return res
	}
	reconcile := func(t *testing.T) workflows.ReconcileResult { return reconcileIn(t, workflows.ReconcileInput{}) }
	awaitNoneAwaiting := func(t *testing.T) {
		eventually(t, "nothing visible as awaiting_payment", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("CheckoutState = '%s' AND ExecutionStatus = 'Running'", shop.StatusAwaitingPayment)})
			return err == nil && len(resp.GetExecutions()) == 0, fmt.Sprint(len(resp.GetExecutions()), err)
		})
	}

	// A run used to ask about one page of checkouts, the same first page every minute, so
	// in a sale with more checkouts near their deadline than a page holds the rest were never
	// asked about. Five paid checkouts whose webhooks never came, pages of two: the run goes
	// through three pages (continuing as new) and confirms all five.
	t.Run("reconciliation pages through every checkout near its deadline", func(t *testing.T) {
		awaitNoneAwaiting(t) // the cases above cancelled theirs; the run must see only these five
		var ids []string
		for range 5 {
			id := testenv.RandomID("page-")
			s.openCheckout(t, id, 600)
			s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
			ids = append(ids, id)
		}
		for _, id := range ids {
			awaitVisible(t, id)
		}
		res := reconcileIn(t, workflows.ReconcileInput{PageSize: 2})
		if res.Checked != 5 || res.Delivered != 5 || res.Pages != 3 {
			t.Errorf("reconciliation %+v: want 5 checked and delivered in 3 pages", res)
		}
		for _, id := range ids {
			eventually(t, "confirmed", func() (bool, string) {
				st, _ := s.pgStatus(t, id)
				return st == "confirmed", id + " " + st
			})
		}
	})

	// Reconciliation used to ask only about running sagas, so a checkout that expired
	// while the webhook of its (succeeded) payment was lost kept the money until the
	// provider's own retry came. Now the run refunds it, once: a second run starts nothing.
	t.Run("reconciliation refunds the payment of a checkout that ended while its webhook was lost", func(t *testing.T) {
		id := testenv.RandomID("ended-")
		s.openCheckout(t, id, 2)
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		eventually(t, "expired", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == string(shop.StatusExpired), st
		})
		query := fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Completed' AND CheckoutState = '%s'", shop.WorkflowID(id), shop.StatusExpired)
		eventually(t, "visible as expired", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			return err == nil && len(resp.GetExecutions()) == 1, fmt.Sprint(err)
		})
		if first := reconcile(t); first.Refunded < 1 || first.EndedChecked < 1 {
			t.Errorf("first run %+v: want this checkout's payment refunded", first)
		}
		eventually(t, "refunded at Stripe", func() (bool, string) {
			return s.refundsOf(pi) == 1, fmt.Sprint(s.refundsOf(pi), " refunds")
		})
		if second := reconcile(t); second.Refunded != 0 {
			t.Errorf("second run %+v: want no refund started", second)
		}
		if n := s.refundsOf(pi); n != 1 {
			t.Errorf("%d refunds of %s after two runs, want 1", n, pi)
		}
	})

	// The checkout's first payment was of the wrong amount (refunded by the product
	// but still "succeeded" at Stripe), its second the right one, and neither webhook came.
	// Reconciliation delivers both: the order is paid by the right one and the wrong one is
	// refunded, where asking Stripe for one payment found only the wrong one.
	t.Run("reconciliation finds the right payment behind one of the wrong amount", func(t *testing.T) {
		id := testenv.RandomID("wh-")
		s.openCheckout(t, id, 600)
		wrong := s.fake.AddIntent(id, "succeeded", unitPrice-1, "usd")
		right := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		awaitVisible(t, id)
		if res := reconcile(t); res.Delivered != 2 {
			t.Errorf("reconciliation %+v: want both payments delivered", res)
		}
		eventually(t, "confirmed, the wrong payment refunded", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == "confirmed" && s.refundsOf(wrong) == 1, fmt.Sprintf("status %s, %d refunds of the wrong payment", st, s.refundsOf(wrong))
		})
		var ref string
		if err := s.pool.QueryRow(t.Context(), `SELECT payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&ref); err != nil || ref != right {
			t.Errorf("order paid by %q (%v), want %s", ref, err, right)
		}
		if n := s.refundsOf(right); n != 0 {
			t.Errorf("%d refunds of the right payment, want 0", n)
		}
	})

	// Reconciliation: a paid checkout whose webhook never arrives is confirmed by
	// ReconcilePayments asking Stripe; a second run changes nothing.
	t.Run("reconciliation confirms a checkout whose webhook was lost", func(t *testing.T) {
		caseStart := time.Now()
		id := testenv.RandomID("wh-")
		s.openCheckout(t, id, 600)
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		awaitVisible(t, id)
		first := reconcile(t)
		if first.Delivered != 1 {
			t.Errorf("first run %+v: want exactly this checkout's payment delivered", first)
		}
		eventually(t, "confirmed", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == "confirmed", st
		})
		var ref string
		if err := s.pool.QueryRow(t.Context(), `SELECT payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&ref); err != nil || ref != pi {
			t.Errorf("order paid by %q (%v), want %s", ref, err, pi)
		}
		// The second run must find nothing to do: wait until visibility no longer lists any
		// checkout as awaiting payment (the earlier cases cancelled theirs).
		awaitNoneAwaiting(t)
		second := reconcile(t)
		if second.Delivered != 0 {
			t.Errorf("second run %+v: want nothing delivered", second)
		}
		status, orders := s.pgStatus(t, id)
		if status != "confirmed" || orders != 1 || s.refundsOf(pi) != 0 || s.paymentSignals(t, id) != 1 {
			t.Errorf("after a second run (%+v): status %s, %d orders, %d refunds, %d payment signals; want confirmed, 1, 0, 1",
				second, status, orders, s.refundsOf(pi), s.paymentSignals(t, id))
		}
		// What the provider listed is recorded as the verified payment the saga confirmed
		// with, once, under the event id the saga saw: never a webhook's.
		if rows := s.events(t, id); len(rows) != 1 || rows[0].EventID != "reconcile-"+pi || rows[0].Disposition != shop.DispositionSignalled {
			t.Errorf("reconciliation recorded rows %+v; want one, reconcile-%s, signalled", rows, pi)
		}
		t.Logf("first run %+v, second run %+v; settled in %s", first, second, time.Since(caseStart).Round(time.Millisecond))
	})
}

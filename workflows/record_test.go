//go:build record

package workflows_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// TestRecordHistories is a generator, not a check: it runs one real execution per saga path
// on a Temporal dev server (the pinned build), with the real worker and activities on a fresh
// Postgres database, Redis and a local Stripe API, and writes each history to
// testdata/<path>.json for TestReplayRecordedHistories. Checkouts start with update-with-start
// exactly as the API starts them, so the histories hold the reservation update's events.
//
// Re-record only when the recorded behaviour is meant to be retired, never to make a failing
// replay pass (see docs/saga-changes.md). It is built only with the
// record tag, so `go test ./...` never runs it:
//
//	TEMPORAL_CLI=$PWD/.tools/temporal STRIPE_MOCK=$PWD/.tools/stripe-mock go test -tags record -count=1 -run TestRecordHistories ./workflows/
func TestRecordHistories(t *testing.T) {
	r := newRecorder(t)
	paths := map[string]func(r *recorder) string{
		"confirmed":                     recordConfirmed,
		"out_of_stock":                  recordOutOfStock,
		"expired":                       recordExpired,
		"cancelled_by_update":           recordCancelledByUpdate,
		"cancelled_by_workflow_cancel":  recordCancelledByWorkflowCancel,
		"payment_failed_then_succeeded": recordPaymentFailedThenSucceeded,
		"payment_canceled":              recordPaymentCanceled,
		"wrong_amount":                  recordWrongAmount, // also writes "refund", its child
		"extended":                      recordExtended,
		"duplicate_payment_signals":     recordDuplicatePaymentSignals,
		"reconcile_payments":            recordReconcilePayments,
		"reconcile_stock":               recordReconcileStock,
		"reconcile_stock_settles":       recordReconcileStockSettles,
		"settle_checkout":               recordSettleCheckout,

		"paid_behind_a_failed_card_at_the_deadline": recordPaidBehindAFailedCardAtTheDeadline,
		"refund_in_the_task_of_a_workflow_cancel":   recordRefundInTheTaskOfAWorkflowCancel,
		"unverified_payment_signals":                recordUnverifiedPaymentSignals,
	}
	for _, name := range recordedHistories {
		if name == "refund" {
			continue
		}
		drive := paths[name]
		if drive == nil {
			t.Fatalf("no recorder for path %q", name)
		}
		t.Run(name, func(t *testing.T) {
			r.t = t
			r.write(name, drive(r))
		})
	}
}

// recorder is the product's worker on real services (checkouttest's one wiring, with a
// local Stripe API for refunds), and a client to drive it.
type recorder struct {
	t          *testing.T
	c          client.Client
	p          *checkouttest.Product
	stripe     *stripetest.Server
	stopWorker func()
}

func newRecorder(t *testing.T) *recorder {
	stripe := stripetest.New(t)
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true, NoWorker: true, Payments: map[string]payments.Provider{
		"stripe": payments.NewStripe(stripe.Key(), payments.WithStripeAPIURL(stripe.URL())),
	}})
	return &recorder{t: t, c: p.Temporal, p: p, stripe: stripe, stopWorker: p.StartWorker(t)}
}

// workerDown runs f with no worker, then starts a new one: what happened meanwhile reaches
// the saga in one workflow task.
func (r *recorder) workerDown(f func()) {
	r.stopWorker()
	f()
	r.stopWorker = r.p.StartWorker(r.t)
}

func (r *recorder) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r.t.Cleanup(cancel)
	return ctx
}

// sku stocks a new random SKU at $19.99.
func (r *recorder) sku(onHand int64) string {
	r.t.Helper()
	sku := testenv.RandomID("SKU-")
	if err := r.p.SetStock(r.ctx(), sku, onHand, 5); err != nil {
		r.t.Fatal(err)
	}
	return sku
}

// start starts a checkout the way the API does (api/checkouts.go, Server.reserve): the same
// workflows.StartOptions and reservation update, and waits for the answer.
func (r *recorder) start(in workflows.Input) workflows.ReservationResult {
	r.t.Helper()
	start := workflows.StartOperation(r.c, in)
	handle, err := r.c.UpdateWithStartWorkflow(r.ctx(), client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions:          workflows.ReservationUpdate(in),
	})
	var res workflows.ReservationResult
	if err == nil {
		err = handle.Get(r.ctx(), &res)
	}
	if err != nil {
		r.t.Fatalf("update-with-start checkout %s: %v", in.CheckoutID, err)
	}
	return res
}

// pay records a verified payment event and signals it, the way the webhook handler does
// (api/webhooks.go): the saga confirms only payments a verified webhook recorded.
func (r *recorder) pay(checkoutID, eventID string, outcome shop.PaymentKind, ref string, amount int64) {
	r.t.Helper()
	p := shop.Payment{Provider: "stripe", EventID: eventID, Outcome: outcome, PaymentRef: ref, AmountCents: amount, Currency: "usd"}
	if _, err := r.p.Store.RecordPaymentEvent(r.ctx(), verifiedEvent(checkoutID, p)); err != nil {
		r.t.Fatalf("record payment %s of %s: %v", eventID, checkoutID, err)
	}
	if err := r.c.SignalWorkflow(r.ctx(), shop.WorkflowID(checkoutID), "", workflows.SignalPayment, p); err != nil {
		r.t.Fatalf("signal %s payment %s to %s: %v", outcome, eventID, checkoutID, err)
	}
}

// update sends a support or customer update and waits for its answer.
func (r *recorder) update(checkoutID, name string, arg any) shop.View {
	r.t.Helper()
	h, err := r.c.UpdateWorkflow(r.ctx(), client.UpdateWorkflowOptions{
		WorkflowID: shop.WorkflowID(checkoutID), UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var v shop.View
	if err == nil {
		err = h.Get(r.ctx(), &v)
	}
	if err != nil {
		r.t.Fatalf("%s update of %s: %v", name, checkoutID, err)
	}
	return v
}

// ended waits for a checkout's saga to close and checks it recorded the path it claims to.
func (r *recorder) ended(checkoutID string, want shop.Status) shop.View {
	r.t.Helper()
	var v shop.View
	if err := r.c.GetWorkflow(r.ctx(), shop.WorkflowID(checkoutID), "").Get(r.ctx(), &v); err != nil {
		r.t.Fatalf("checkout %s: %v", checkoutID, err)
	}
	if v.Status != want {
		r.t.Fatalf("checkout %s ended %s (%v), want %s: the history would not be the path it is named after", checkoutID, v.Status, deref(v.Reason), want)
	}
	return v
}

// write saves the closed execution's full history as testdata/<name>.json, in the protojson
// form `temporal workflow show --output json` writes and the replayer reads, and replays it
// once at once so a history that cannot replay is never written silently.
func (r *recorder) write(name, workflowID string) {
	r.t.Helper()
	hist := &historypb.History{}
	it := r.c.GetWorkflowHistory(r.ctx(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			r.t.Fatalf("read history of %s: %v", workflowID, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	last := hist.Events[len(hist.Events)-1].GetEventType()
	if last != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
		r.t.Fatalf("history of %s ends with %s, want a completed execution", workflowID, last)
	}
	raw, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		r.t.Fatalf("encode history of %s: %v", workflowID, err)
	}
	if err := os.MkdirAll(historiesDir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(historyFile(name), append(raw, '\n'), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := replayHistory(historyFile(name)); err != nil {
		r.t.Fatalf("the history just recorded does not replay: %v", err)
	}
	r.t.Logf("%s: %d events from %s", historyFile(name), len(hist.Events), workflowID)
}

func recordConfirmed(r *recorder) string {
	in := checkoutInput("c-confirmed", 600, r.sku(10), r.sku(10))
	res := r.start(in)
	if !res.Created || res.View.Status != shop.StatusAwaitingPayment {
		r.t.Fatalf("reservation answered %+v", res)
	}
	r.pay(in.CheckoutID, "evt_confirmed", shop.PaymentSucceeded, "pi_confirmed", res.View.AmountCents)
	r.ended(in.CheckoutID, shop.StatusConfirmed)
	return shop.WorkflowID(in.CheckoutID)
}

// A declined card and then a good one inside the window, while the worker is down across the
// deadline: the restarted worker's task holds the failure, the payment and the timer, and the
// payment wins (the pending-payments-before-an-end marker).
func recordPaidBehindAFailedCardAtTheDeadline(r *recorder) string {
	in := checkoutInput("c-paid-behind-a-failed-card", 3, r.sku(10))
	res := r.start(in)
	r.workerDown(func() {
		r.pay(in.CheckoutID, "evt_declined", shop.PaymentFailed, "pi_declined", res.View.AmountCents)
		r.pay(in.CheckoutID, "evt_second_card", shop.PaymentSucceeded, "pi_second_card", res.View.AmountCents)
		if time.Now().After(*res.View.ExpiresAt) {
			r.t.Fatalf("the payments were sent after expires_at %s: record again on a quieter machine", res.View.ExpiresAt)
		}
		time.Sleep(time.Until(res.View.ExpiresAt.Add(2 * time.Second)))
	})
	r.ended(in.CheckoutID, shop.StatusConfirmed)
	return shop.WorkflowID(in.CheckoutID)
}

// A wrong amount and the workflow's cancellation in one task: the refund starts on a
// disconnected context (the refunds-outlive-cancellation marker).
func recordRefundInTheTaskOfAWorkflowCancel(r *recorder) string {
	in := checkoutInput("c-refund-in-the-task-of-a-cancel", 600, r.sku(10))
	res := r.start(in)
	r.workerDown(func() {
		r.pay(in.CheckoutID, "evt_short", shop.PaymentSucceeded, "pi_short", res.View.AmountCents-1)
		if err := r.c.CancelWorkflow(r.ctx(), shop.WorkflowID(in.CheckoutID), ""); err != nil {
			r.t.Fatalf("cancel workflow: %v", err)
		}
	})
	v := r.ended(in.CheckoutID, shop.StatusCancelled)
	if len(v.Refunds) != 1 {
		r.t.Fatalf("refunds %v, want the short payment's", v.Refunds)
	}
	return shop.WorkflowID(in.CheckoutID)
}

func recordOutOfStock(r *recorder) string {
	in := checkoutInput("c-out-of-stock", 600, r.sku(10), r.sku(0))
	if res := r.start(in); res.RejectCode != shop.RejectOutOfStock {
		r.t.Fatalf("reservation answered %+v, want out_of_stock", res)
	}
	r.ended(in.CheckoutID, shop.StatusOutOfStock)
	return shop.WorkflowID(in.CheckoutID)
}

func recordExpired(r *recorder) string {
	in := checkoutInput("c-expired", 2, r.sku(10))
	r.start(in)
	r.ended(in.CheckoutID, shop.StatusExpired)
	return shop.WorkflowID(in.CheckoutID)
}

func recordCancelledByUpdate(r *recorder) string {
	in := checkoutInput("c-cancelled-by-update", 600, r.sku(10))
	r.start(in)
	if v := r.update(in.CheckoutID, workflows.UpdateCancel, workflows.CancelRequest{By: "customer"}); v.Status != shop.StatusCancelled {
		r.t.Fatalf("cancel update answered %s", v.Status)
	}
	r.ended(in.CheckoutID, shop.StatusCancelled)
	return shop.WorkflowID(in.CheckoutID)
}

func recordCancelledByWorkflowCancel(r *recorder) string {
	in := checkoutInput("c-cancelled-by-workflow-cancel", 600, r.sku(10))
	r.start(in)
	if err := r.c.CancelWorkflow(r.ctx(), shop.WorkflowID(in.CheckoutID), ""); err != nil {
		r.t.Fatalf("cancel workflow: %v", err)
	}
	r.ended(in.CheckoutID, shop.StatusCancelled)
	return shop.WorkflowID(in.CheckoutID)
}

func recordPaymentFailedThenSucceeded(r *recorder) string {
	in := checkoutInput("c-payment-failed-then-succeeded", 600, r.sku(10))
	res := r.start(in)
	// Signals enter the history, and the saga, in the order they are sent.
	r.pay(in.CheckoutID, "evt_declined", shop.PaymentFailed, "pi_declined", res.View.AmountCents)
	r.pay(in.CheckoutID, "evt_second_card", shop.PaymentSucceeded, "pi_second_card", res.View.AmountCents)
	r.ended(in.CheckoutID, shop.StatusConfirmed)
	return shop.WorkflowID(in.CheckoutID)
}

// Payment signals no verified event recorded (a succeeded one naming the buyer's payment before
// its webhook, and a canceled one), sent as the Web UI or the CLI sends them: each is verified,
// flagged and ignored; then the buyer's verified payment confirms.
func recordUnverifiedPaymentSignals(r *recorder) string {
	in := checkoutInput("c-unverified-payment-signals", 600, r.sku(10))
	res := r.start(in)
	for _, p := range []shop.Payment{
		{Provider: "stripe", EventID: "evt_from_the_ui", Outcome: shop.PaymentSucceeded, PaymentRef: "pi_unverified", AmountCents: res.View.AmountCents, Currency: "usd"},
		{Provider: "stripe", EventID: "evt_canceled_from_the_cli", Outcome: shop.PaymentCanceled, PaymentRef: "pi_unverified", AmountCents: res.View.AmountCents, Currency: "usd"},
	} {
		if err := r.c.SignalWorkflow(r.ctx(), shop.WorkflowID(in.CheckoutID), "", workflows.SignalPayment, p); err != nil {
			r.t.Fatalf("signal %s: %v", p.EventID, err)
		}
	}
	r.pay(in.CheckoutID, "evt_verified", shop.PaymentSucceeded, "pi_unverified", res.View.AmountCents)
	if v := r.ended(in.CheckoutID, shop.StatusConfirmed); !v.NeedsAttention || len(v.Refunds) != 0 {
		r.t.Fatalf("confirmed with needs_attention %v and refunds %v, want flagged and none", v.NeedsAttention, v.Refunds)
	}
	return shop.WorkflowID(in.CheckoutID)
}

func recordPaymentCanceled(r *recorder) string {
	in := checkoutInput("c-payment-canceled", 600, r.sku(10))
	res := r.start(in)
	r.pay(in.CheckoutID, "evt_canceled", shop.PaymentCanceled, "pi_canceled", res.View.AmountCents)
	r.ended(in.CheckoutID, shop.StatusPaymentFailed)
	return shop.WorkflowID(in.CheckoutID)
}

func recordExtended(r *recorder) string {
	in := checkoutInput("c-extended", 5, r.sku(10))
	res := r.start(in)
	v := r.update(in.CheckoutID, workflows.UpdateExtend, workflows.ExtendRequest{Seconds: 600})
	if v.ExpiresAt == nil || !v.ExpiresAt.After(*res.View.ExpiresAt) {
		r.t.Fatalf("extend answered expires_at %v, was %v", v.ExpiresAt, res.View.ExpiresAt)
	}
	r.pay(in.CheckoutID, "evt_extended", shop.PaymentSucceeded, "pi_extended", res.View.AmountCents)
	r.ended(in.CheckoutID, shop.StatusConfirmed)
	return shop.WorkflowID(in.CheckoutID)
}

func recordDuplicatePaymentSignals(r *recorder) string {
	in := checkoutInput("c-duplicate-payment-signals", 600, r.sku(10))
	res := r.start(in)
	// The provider delivers the webhook twice, and reconciliation finds the same payment
	// under its own event id: one order, no refund.
	r.pay(in.CheckoutID, "evt_dup", shop.PaymentSucceeded, "pi_dup", res.View.AmountCents)
	r.pay(in.CheckoutID, "evt_dup", shop.PaymentSucceeded, "pi_dup", res.View.AmountCents)
	r.pay(in.CheckoutID, "reconcile-pi_dup", shop.PaymentSucceeded, "pi_dup", res.View.AmountCents)
	if v := r.ended(in.CheckoutID, shop.StatusConfirmed); len(v.Refunds) != 0 {
		r.t.Fatalf("duplicates started refunds %v", v.Refunds)
	}
	return shop.WorkflowID(in.CheckoutID)
}

// recordWrongAmount pays a checkout with the wrong amount through a real (local) Stripe
// intent: the saga flags itself, starts a Refund child, and expires. The child refunds the
// payment through the Stripe API; its history is written as "refund".
func recordWrongAmount(r *recorder) string {
	in := checkoutInput("c-wrong-amount", 3, r.sku(10))
	res := r.start(in)
	wrong := res.View.AmountCents - 100
	pi := r.stripe.AddIntent(in.CheckoutID, "succeeded", wrong, "usd")
	r.pay(in.CheckoutID, "evt_wrong_amount", shop.PaymentSucceeded, pi, wrong)
	v := r.ended(in.CheckoutID, shop.StatusExpired)
	refundID := workflows.RefundWorkflowID("stripe", pi)
	if !v.NeedsAttention || len(v.Refunds) != 1 || v.Refunds[0] != refundID {
		r.t.Fatalf("wrong amount ended %+v, want flagged with refund %s", v, refundID)
	}
	var rv workflows.RefundView
	if err := r.c.GetWorkflow(r.ctx(), refundID, "").Get(r.ctx(), &rv); err != nil {
		r.t.Fatalf("refund %s: %v", refundID, err)
	}
	if rv.Status != workflows.RefundRefunded || len(r.stripe.Refunds()) != 1 {
		r.t.Fatalf("refund ended %+v with stripe refunds %+v, want one refund", rv, r.stripe.Refunds())
	}
	r.write("refund", refundID)
	return shop.WorkflowID(in.CheckoutID)
}

// recordReconcilePayments runs ReconcilePayments for a checkout whose webhook never came:
// the provider knows the payment, the reconciler signals it, the checkout is confirmed.
func recordReconcilePayments(r *recorder) string {
	in := checkoutInput("c-missed-webhook", 120, r.sku(10))
	res := r.start(in)
	r.stripe.AddIntent(in.CheckoutID, "succeeded", res.View.AmountCents, "usd")
	query := fmt.Sprintf("WorkflowId = '%s' AND CheckoutState = '%s'", shop.WorkflowID(in.CheckoutID), shop.StatusAwaitingPayment)
	r.waitListed(query)

	id := "reconcile-payments-record"
	run, err := r.c.ExecuteWorkflow(r.ctx(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.ReconcilePayments, workflows.ReconcileInput{WithinSeconds: 300})
	if err != nil {
		r.t.Fatalf("start ReconcilePayments: %v", err)
	}
	var got workflows.ReconcileResult
	if err := run.Get(r.ctx(), &got); err != nil || got.Delivered != 1 {
		r.t.Fatalf("ReconcilePayments: %+v, %v; want one payment delivered", got, err)
	}
	r.ended(in.CheckoutID, shop.StatusConfirmed)
	return id
}

// recordReconcileStock runs ReconcileStock with a hold in Redis that no checkout in
// Postgres explains: the run flags itself for support.
// terminatedAndPaid starts a checkout, terminates its saga, and records a verified payment
// for it that no saga will take (the webhook's record step, before its signal).
func (r *recorder) terminatedAndPaid(checkoutID string) {
	r.t.Helper()
	in := checkoutInput(checkoutID, 600, r.sku(10))
	r.start(in)
	if err := r.c.TerminateWorkflow(r.ctx(), shop.WorkflowID(checkoutID), "", "support pressed Terminate"); err != nil {
		r.t.Fatalf("terminate %s: %v", checkoutID, err)
	}
	p := shop.Payment{Provider: "stripe", EventID: "evt-" + checkoutID, Outcome: shop.PaymentSucceeded,
		PaymentRef: r.stripe.AddIntent(checkoutID, "succeeded", 1999, "usd"), AmountCents: 1999, Currency: "usd"}
	if _, err := r.p.Store.RecordPaymentEvent(r.ctx(), verifiedEvent(checkoutID, p)); err != nil {
		r.t.Fatalf("record payment of %s: %v", checkoutID, err)
	}
}

func recordReconcileStockSettles(r *recorder) string {
	r.terminatedAndPaid("c-reconcile-settles")
	id := "reconcile-stock-settles-record"
	run, err := r.c.ExecuteWorkflow(r.ctx(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.ReconcileStock, steps.ReconcileStockInput{})
	if err != nil {
		r.t.Fatalf("start ReconcileStock: %v", err)
	}
	var got steps.ReconcileStockResult
	if err := run.Get(r.ctx(), &got); err != nil || len(got.Refunds) != 1 {
		r.t.Fatalf("ReconcileStock: %+v, %v; want the terminated checkout's payment refunded", got, err)
	}
	return id
}

func recordSettleCheckout(r *recorder) string {
	r.terminatedAndPaid("c-settle")
	id := workflows.SettleWorkflowID("c-settle")
	run, err := r.c.ExecuteWorkflow(r.ctx(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.SettleCheckout, "c-settle")
	if err != nil {
		r.t.Fatalf("start SettleCheckout: %v", err)
	}
	var got steps.SettleCheckoutResult
	if err := run.Get(r.ctx(), &got); err != nil || !got.Ended || len(got.Refunds) != 1 {
		r.t.Fatalf("SettleCheckout: %+v, %v; want the checkout ended and its payment refunded", got, err)
	}
	return id
}

func recordReconcileStock(r *recorder) string {
	sku := r.sku(10)
	if _, err := r.p.Stock.Reserve(r.ctx(), sku, "c-nobody-knows", 1); err != nil {
		r.t.Fatalf("take a stray hold: %v", err)
	}
	id := "reconcile-stock-record"
	run, err := r.c.ExecuteWorkflow(r.ctx(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
		workflows.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 1})
	if err != nil {
		r.t.Fatalf("start ReconcileStock: %v", err)
	}
	var got steps.ReconcileStockResult
	if err := run.Get(r.ctx(), &got); err != nil || len(got.Unexplained) == 0 {
		r.t.Fatalf("ReconcileStock: %+v, %v; want the stray hold unexplained", got, err)
	}
	return id
}

// waitListed waits until a visibility query finds a workflow (visibility lags a little).
func (r *recorder) waitListed(query string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		resp, err := r.c.ListWorkflow(r.ctx(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		return err == nil && len(resp.GetExecutions()) > 0
	}, 30*time.Second, 100*time.Millisecond, "visibility query %q found nothing", query)
}

package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The saga runs on the SDK's time-skipping environment with the REAL activities, backed by
// a fresh Postgres database and the real Redis: every branch below checks what actually
// happened to stock and orders, not what a mock was told.

type fixture struct {
	t       *testing.T
	refunds []workflows.RefundInput // Refund children the saga started (the child is tested on its own)
	env     *testsuite.TestWorkflowEnvironment
	acts    *activities.Activities
	inv     *inventory.Inventory
	pool    *pgxpool.Pool
	stock   *lua.Stock
	// checkoutID is the checkout run runs, for the payment events signalPayment records.
	checkoutID string
	// errorsLogged counts what the workflows logged at Error: each is a page for support.
	errorsLogged *atomic.Int64
}

// countingErrors is a log handler that counts the records at Error or above, and hands every
// record on.
type countingErrors struct {
	slog.Handler
	n *atomic.Int64
}

func (h countingErrors) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingErrors) WithAttrs(attrs []slog.Attr) slog.Handler {
	return countingErrors{h.Handler.WithAttrs(attrs), h.n}
}

func (h countingErrors) WithGroup(name string) slog.Handler {
	return countingErrors{h.Handler.WithGroup(name), h.n}
}

// newFixture is the saga's environment; Refund children are recorded, not run (the Refund
// workflow has its own tests, see refund_test.go).
func newFixture(t *testing.T) *fixture {
	f := newRealFixture(t)
	f.env.OnWorkflow(workflows.Refund, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.RefundInput) (workflows.RefundView, error) {
			f.refunds = append(f.refunds, in)
			return workflows.RefundView{RefundInput: in, Status: workflows.RefundRefunded}, nil
		})
	return f
}

// newRealFixture runs every workflow for real.
func newRealFixture(t *testing.T) *fixture {
	_, pool := testenv.Postgres(t)
	return newFixtureOn(t, pool, lua.New(testenv.Redis(t)))
}

// newFixtureOver is a new test environment (a Temporal that remembers nothing) over the
// Postgres and Redis of an earlier fixture; Refund children are recorded, as in newFixture.
func newFixtureOver(t *testing.T, earlier *fixture) *fixture {
	f := newFixtureOn(t, earlier.pool, earlier.stock)
	f.env.OnWorkflow(workflows.Refund, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.RefundInput) (workflows.RefundView, error) {
			f.refunds = append(f.refunds, in)
			return workflows.RefundView{RefundInput: in, Status: workflows.RefundRefunded}, nil
		})
	return f
}

func newFixtureOn(t *testing.T, pool *pgxpool.Pool, stock *lua.Stock) *fixture {
	store := store.New(pool)
	f := &fixture{
		t:     t,
		acts:  &activities.Activities{Store: store, Stock: stock},
		inv:   &inventory.Inventory{Store: store, Stock: stock},
		pool:  pool,
		stock: stock,

		errorsLogged: &atomic.Int64{},
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(countingErrors{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), f.errorsLogged})))
	f.env = s.NewTestWorkflowEnvironment()
	worker.Register(f.env, f.acts)
	return f
}

// sku stocks a new random SKU.
func (f *fixture) sku(onHand, priceCents, maxPerOrder int64) string {
	sku := testenv.RandomID("SKU-")
	_, err := f.inv.Set(context.Background(), shop.Product{
		SKU: sku, OnHand: onHand, SaleTerms: shop.SaleTerms{PriceCents: priceCents, Currency: "usd", MaxPerOrder: maxPerOrder},
	})
	if err != nil {
		f.t.Fatalf("stock %s: %v", sku, err)
	}
	return sku
}

// level reads a SKU from both stores and checks the at-rest invariant.
func (f *fixture) level(sku string) shop.InventoryView {
	f.t.Helper()
	v, err := f.inv.Get(context.Background(), sku)
	if err != nil {
		f.t.Fatalf("read %s: %v", sku, err)
	}
	if v.Available+v.Held != v.OnHand {
		f.t.Errorf("%s: available %d + held %d != on_hand %d", sku, v.Available, v.Held, v.OnHand)
	}
	return v
}

func (f *fixture) orders(checkoutID string) int {
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE checkout_id = $1`, checkoutID).Scan(&n); err != nil {
		f.t.Fatalf("count orders: %v", err)
	}
	return n
}

func (f *fixture) recorded(checkoutID string) shop.CheckoutRecord {
	rec, err := f.acts.Store.Checkout(context.Background(), checkoutID)
	if err != nil {
		f.t.Fatalf("read checkout %s: %v", checkoutID, err)
	}
	return rec
}

// reserveAt sends the reservation update at d and keeps its answer.
func (f *fixture) reserveAt(d time.Duration, requestID string) *workflows.ReservationResult {
	var got workflows.ReservationResult
	f.env.RegisterDelayedCallback(func() {
		f.env.UpdateWorkflow(workflows.UpdateReservation, "reserve-"+requestID, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { f.t.Errorf("reservation update rejected: %v", err) },
			OnComplete: func(v any, err error) {
				if err != nil {
					f.t.Errorf("reservation update failed: %v", err)
					return
				}
				got = v.(workflows.ReservationResult)
			},
		}, workflows.ReservationRequest{RequestID: requestID})
	}, d)
	return &got
}

func (f *fixture) payAt(d time.Duration, p shop.Payment) {
	f.env.RegisterDelayedCallback(func() {
		f.signalPayment(false, p)
	}, d)
}

// signalPayment records p as the verified event a webhook would record for the checkout
// being run, then signals it to the saga (skipping the workflow task, with skipTask, so it
// lands in the same task as what comes next). The saga confirms only recorded payments.
func (f *fixture) signalPayment(skipTask bool, p shop.Payment) {
	f.recordPayment(f.checkoutID, p)
	if skipTask {
		f.env.SignalWorkflowSkippingWorkflowTask(workflows.SignalPayment, p)
		return
	}
	f.env.SignalWorkflow(workflows.SignalPayment, p)
}

// recordPayment stores p as a verified payment event of checkoutID.
func (f *fixture) recordPayment(checkoutID string, p shop.Payment) {
	f.t.Helper()
	if _, err := f.acts.Store.RecordPaymentEvent(context.Background(), verifiedEvent(checkoutID, p)); err != nil {
		f.t.Fatalf("record payment %s: %v", p.EventID, err)
	}
}

// verifiedEvent is p as the event a verified webhook records for checkoutID.
func verifiedEvent(checkoutID string, p shop.Payment) shop.PaymentEvent {
	return shop.PaymentEvent{Provider: p.Provider, EventID: p.EventID, Type: "test", CheckoutID: checkoutID,
		PaymentRef: p.PaymentRef, AmountCents: p.AmountCents, Currency: p.Currency, Outcome: string(p.Outcome), Payload: []byte("{}")}
}

func (f *fixture) run(in workflows.Input) shop.View {
	f.t.Helper()
	f.checkoutID = in.CheckoutID
	f.env.ExecuteWorkflow(workflows.Checkout, in)
	if !f.env.IsWorkflowCompleted() {
		f.t.Fatal("workflow did not complete")
	}
	if err := f.env.GetWorkflowError(); err != nil {
		f.t.Fatalf("workflow failed: %v", err)
	}
	var v shop.View
	if err := f.env.GetWorkflowResult(&v); err != nil {
		f.t.Fatalf("read result: %v", err)
	}
	return v
}

// phoneCheckout is the usual start of a saga test: a fixture, a phone SKU (10 units at
// 999.00 USD, at most 2 per order) and a checkout of qty phones.
func phoneCheckout(t *testing.T, qty int64) (*fixture, string, workflows.Input) {
	f := newFixture(t)
	phone := f.sku(10, 99_900, 2)
	return f, phone, input(shop.Item{SKU: phone, Quantity: qty})
}

func input(items ...shop.Item) workflows.Input {
	return workflows.Input{
		CheckoutID: testenv.RandomID("c-"), CustomerID: "u-9", Items: cartLines(items),
		PaymentTimeoutSeconds: 900, RequestID: "req-1", RequestHash: "h", Shape: workflows.NewestShape,
	}
}

func paid(id string, cents int64) shop.Payment {
	return shop.Payment{Provider: "stripe", EventID: id, Outcome: shop.PaymentSucceeded,
		PaymentRef: "pi_" + id, AmountCents: cents, Currency: "usd"}
}

func TestHappyPathConfirmsOrderAndCommitsHolds(t *testing.T) {
	f := newFixture(t)
	phone, cover := f.sku(10, 99_900, 2), f.sku(5, 1_000, 3)
	in := input(shop.Item{SKU: phone, Quantity: 2}, shop.Item{SKU: cover, Quantity: 1})
	res := f.reserveAt(0, "req-1")
	f.payAt(5*time.Minute, paid("evt_1", 2*99_900+1_000))

	v := f.run(in)

	if v.Status != shop.StatusConfirmed || v.OrderID == nil {
		t.Fatalf("status %s order %v, want confirmed with an order", v.Status, v.OrderID)
	}
	if res.View.Status != shop.StatusAwaitingPayment || !res.Created || res.View.AmountCents != 200_800 {
		t.Errorf("reservation answer = %+v, want awaiting_payment, created, 200800 cents", res)
	}
	if res.View.ExpiresAt == nil {
		t.Error("reservation answer has no expires_at")
	}
	if n := f.orders(in.CheckoutID); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	p := f.level(phone)
	if p.OnHand != 8 || p.Sold != 2 || p.Held != 0 || p.Available != 8 {
		t.Errorf("phone after sale: %+v, want on_hand 8 sold 2 held 0 available 8", p)
	}
	if rec := f.recorded(in.CheckoutID); rec.Status != "confirmed" || rec.OrderID != *v.OrderID {
		t.Errorf("postgres checkout = %s/%s, want confirmed/%s", rec.Status, rec.OrderID, *v.OrderID)
	}
	var ledger int64
	if err := f.pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(delta_sold), 0) FROM inventory_ledger WHERE checkout_id = $1`, in.CheckoutID).Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != 3 {
		t.Errorf("ledger records %d units sold, want 3", ledger)
	}
}

func TestSecondSKUOutOfStockReleasesTheFirst(t *testing.T) {
	f := newFixture(t)
	phone, cover := f.sku(10, 99_900, 2), f.sku(1, 1_000, 3)
	in := input(shop.Item{SKU: phone, Quantity: 2}, shop.Item{SKU: cover, Quantity: 2})
	res := f.reserveAt(0, "req-1")

	v := f.run(in)

	if v.Status != shop.StatusOutOfStock {
		t.Fatalf("status %s, want out_of_stock", v.Status)
	}
	if res.RejectCode != shop.RejectOutOfStock || len(res.View.Shortages) != 1 ||
		res.View.Shortages[0] != (shop.Shortage{SKU: cover, Requested: 2, Available: 1}) {
		t.Errorf("reservation answer = %+v, want one shortage of %s (2 requested, 1 available)", res, cover)
	}
	if p := f.level(phone); p.Available != 10 || p.Held != 0 {
		t.Errorf("phone: %+v, want all 10 available again", p)
	}
	if c := f.level(cover); c.Available != 1 || c.Held != 0 {
		t.Errorf("cover: %+v, want untouched", c)
	}
	if rec := f.recorded(in.CheckoutID); rec.Status != "out_of_stock" || rec.EndedAt == nil {
		t.Errorf("postgres checkout = %+v, want ended out_of_stock", rec)
	}
}

func TestPaymentTimerExpiresAndReleases(t *testing.T) {
	f, phone, in := phoneCheckout(t, 2)
	in.PaymentTimeoutSeconds = 600
	start := f.env.Now()

	v := f.run(in)

	if v.Status != shop.StatusExpired {
		t.Fatalf("status %s, want expired", v.Status)
	}
	if waited := f.env.Now().Sub(start); waited < 10*time.Minute {
		t.Errorf("expired after %s, want the 10 minute payment window", waited)
	}
	if p := f.level(phone); p.Available != 10 || p.Held != 0 || p.Sold != 0 {
		t.Errorf("phone: %+v, want all 10 available again", p)
	}
	if rec := f.recorded(in.CheckoutID); rec.Status != "expired" {
		t.Errorf("postgres status %s, want expired", rec.Status)
	}
}

func TestCancelWhileWaitingStillReleases(t *testing.T) {
	for _, how := range []string{"workflow cancellation", "cancel update"} {
		t.Run(how, func(t *testing.T) {
			f, phone, in := phoneCheckout(t, 2)
			f.env.RegisterDelayedCallback(func() {
				if f.level(phone).Held != 2 {
					t.Error("expected 2 units held while waiting for payment")
				}
				if how == "workflow cancellation" {
					f.env.CancelWorkflow()
					return
				}
				f.env.UpdateWorkflow(workflows.UpdateCancel, "cancel-1", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { t.Errorf("cancel rejected: %v", err) },
					OnComplete: func(v any, err error) {
						if err != nil || v.(shop.View).Status != shop.StatusCancelled {
							t.Errorf("cancel answered %v, %v; want the cancelled view", v, err)
						}
					},
				}, workflows.CancelRequest{By: "customer"})
			}, time.Minute)

			v := f.run(in)

			if v.Status != shop.StatusCancelled {
				t.Fatalf("status %s, want cancelled", v.Status)
			}
			if p := f.level(phone); p.Available != 10 || p.Held != 0 {
				t.Errorf("phone: %+v, want all 10 available again", p)
			}
			if rec := f.recorded(in.CheckoutID); rec.Status != "cancelled" {
				t.Errorf("postgres status %s, want cancelled", rec.Status)
			}
		})
	}
}

func TestPaymentFailedThenSucceededPays(t *testing.T) {
	// A declined card is one attempt: the buyer retries with another card while the
	// checkout is open, and that payment confirms it.
	f, _, in := phoneCheckout(t, 1)
	f.payAt(time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_f", Outcome: shop.PaymentFailed, PaymentRef: "pi_1"})
	f.payAt(2*time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_s", Outcome: shop.PaymentSucceeded, PaymentRef: "pi_1", AmountCents: 99_900, Currency: "usd"})

	if v := f.run(in); v.Status != shop.StatusConfirmed {
		t.Fatalf("status %s, want confirmed", v.Status)
	}
}

func TestPaymentFailedReleasesAtDeadline(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	in.PaymentTimeoutSeconds = 600
	f.payAt(time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_f", Outcome: shop.PaymentFailed, PaymentRef: "pi_1"})
	start := f.env.Now()

	v := f.run(in)

	if v.Status != shop.StatusPaymentFailed {
		t.Fatalf("status %s, want payment_failed", v.Status)
	}
	if f.env.Now().Sub(start) < 10*time.Minute {
		t.Error("a failed attempt ended the checkout before its deadline; the buyer could not retry")
	}
	if p := f.level(phone); p.Available != 10 || p.Held != 0 {
		t.Errorf("phone: %+v, want all 10 available again", p)
	}
	if f.orders(in.CheckoutID) != 0 {
		t.Error("an order was written for a failed payment")
	}
}

func TestPaymentCanceledReleasesAtOnce(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	f.payAt(time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_x", Outcome: shop.PaymentCanceled, PaymentRef: "pi_1"})
	start := f.env.Now()

	v := f.run(in)

	if v.Status != shop.StatusPaymentFailed || f.env.Now().Sub(start) > 2*time.Minute {
		t.Fatalf("status %s after %s, want payment_failed right after the cancel", v.Status, f.env.Now().Sub(start))
	}
	if p := f.level(phone); p.Available != 10 || p.Held != 0 {
		t.Errorf("phone: %+v, want all 10 available again", p)
	}
}

func TestDuplicateAndLatePaymentSignalsConfirmOnce(t *testing.T) {
	f, phone, in := phoneCheckout(t, 2)
	f.payAt(time.Minute, paid("evt_1", 199_800))
	f.payAt(time.Minute, paid("evt_1", 199_800)) // the same event redelivered
	reconciled := paid("reconcile-pi_evt_1", 199_800)
	reconciled.PaymentRef = "pi_evt_1" // the same payment found by reconciliation
	f.payAt(time.Minute, reconciled)
	f.payAt(time.Minute, paid("evt_2", 199_800)) // a second, different payment while confirming
	f.payAt(time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_3", Outcome: shop.PaymentFailed})

	v := f.run(in)

	if v.Status != shop.StatusConfirmed {
		t.Fatalf("status %s, want confirmed", v.Status)
	}
	if n := f.orders(in.CheckoutID); n != 1 {
		t.Errorf("%d orders, want exactly 1", n)
	}
	if p := f.level(phone); p.Sold != 2 || p.OnHand != 8 {
		t.Errorf("phone: %+v, want 2 sold once", p)
	}
	if len(f.refunds) != 1 || f.refunds[0].PaymentRef != "pi_evt_2" || f.refunds[0].AmountCents != 199_800 {
		t.Errorf("refunds %+v, want exactly the second payment (pi_evt_2) refunded", f.refunds)
	}
}

// Event ids and payment refs are each provider's own: two providers that number them alike
// (Standard Webhooks providers with sequential ids, say) name two payments by one id. The
// saga takes a payment for a repeat only when the provider is the same too, as Postgres does;
// otherwise the second payment, the one of the right amount, would be dropped as a
// duplicate and the money kept without an order.
func TestAnotherProvidersPaymentUnderTheSameIDIsNoRepeat(t *testing.T) {
	for name, c := range map[string]struct{ first, second shop.Payment }{
		"event id": { // acme's declined card was its event 7; stripe's success is its event 7 too
			first:  shop.Payment{Provider: "acme", EventID: "7", Outcome: shop.PaymentFailed, PaymentRef: "acme-pay-1"},
			second: shop.Payment{Provider: "stripe", EventID: "7", Outcome: shop.PaymentSucceeded, PaymentRef: "pi-1", AmountCents: 99_900, Currency: "usd"},
		},
		"payment ref": { // acme's payment 7 was of the wrong amount; stripe's payment 7 is right
			first:  shop.Payment{Provider: "acme", EventID: "acme-evt-1", Outcome: shop.PaymentSucceeded, PaymentRef: "7", AmountCents: 1, Currency: "usd"},
			second: shop.Payment{Provider: "stripe", EventID: "evt-1", Outcome: shop.PaymentSucceeded, PaymentRef: "7", AmountCents: 99_900, Currency: "usd"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f, _, in := phoneCheckout(t, 1)
			f.payAt(time.Minute, c.first)
			f.payAt(2*time.Minute, c.second)

			v := f.run(in)

			if v.Status != shop.StatusConfirmed || f.orders(in.CheckoutID) != 1 {
				t.Fatalf("status %s with %d orders, want confirmed by %s's payment %s", v.Status, f.orders(in.CheckoutID), c.second.Provider, c.second.PaymentRef)
			}
			if rec := f.recorded(in.CheckoutID); rec.PaymentProvider != c.second.Provider || rec.PaymentRef != c.second.PaymentRef {
				t.Errorf("order paid by %s %s, want %s %s", rec.PaymentProvider, rec.PaymentRef, c.second.Provider, c.second.PaymentRef)
			}
			wantRefunds := 0
			if c.first.Outcome == shop.PaymentSucceeded {
				wantRefunds = 1 // the wrong amount
			}
			if len(f.refunds) != wantRefunds || wantRefunds == 1 && (f.refunds[0].Provider != c.first.Provider || f.refunds[0].PaymentRef != c.first.PaymentRef) {
				t.Errorf("refunds %+v, want %d, of %s's payment only", f.refunds, wantRefunds, c.first.Provider)
			}
		})
	}
}

// A GetVersion that a saga asks writes a Version marker and a search-attribute upsert into its
// history. A new checkout's way to confirmed asks none: what every new saga takes comes with
// its input's shape (workflows.NewestShape). A saga an older API started (a lower shape) still
// asks the changes it met, and keys and verifies payments as its history says.
func TestANewSagaAsksNoVersionOnItsWayToConfirmed(t *testing.T) {
	for name, c := range map[string]struct {
		shape int
		want  map[string]bool
	}{
		"newest shape":                     {shape: workflows.NewestShape, want: map[string]bool{}},
		"started before the shapes":        {shape: 0, want: map[string]bool{"payment-keys-by-provider": true, "verified-payment-events": true}},
		"started before verified payments": {shape: 1, want: map[string]bool{"verified-payment-events": true}},
	} {
		t.Run(name, func(t *testing.T) {
			f, _, in := phoneCheckout(t, 1)
			in.Shape = c.shape
			asked := &versionsAsked{asked: map[string]bool{}}
			f.env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{asked}})
			f.payAt(time.Minute, paid("evt_1", 99_900))

			v := f.run(in)

			if v.Status != shop.StatusConfirmed {
				t.Fatalf("status %s, want confirmed", v.Status)
			}
			if !maps.Equal(asked.asked, c.want) {
				t.Errorf("GetVersion asked %v, want %v", asked.asked, c.want)
			}
		})
	}
}

// versionsAsked notes the change ids a saga asks workflow.GetVersion about.
type versionsAsked struct {
	interceptor.WorkerInterceptorBase
	asked map[string]bool
}

func (v *versionsAsked) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &versionsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, root: v}
}

type versionsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	root *versionsAsked
}

func (i *versionsInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&versionsOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, root: i.root})
}

type versionsOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	root *versionsAsked
}

func (o *versionsOutbound) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	o.root.asked[changeID] = true
	return o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
}

func TestWrongAmountNeverConfirms(t *testing.T) {
	for name, p := range map[string]shop.Payment{
		"amount":   paid("evt_w", 1),
		"currency": {Provider: "stripe", EventID: "evt_c", Outcome: shop.PaymentSucceeded, PaymentRef: "pi_c", AmountCents: 99_900, Currency: "eur"},
	} {
		t.Run(name, func(t *testing.T) {
			f, phone, in := phoneCheckout(t, 1)
			in.PaymentTimeoutSeconds = 300
			f.payAt(time.Minute, p)
			f.env.RegisterDelayedCallback(func() {
				v, err := f.env.QueryWorkflow(workflows.QueryStatus)
				if err != nil {
					t.Fatalf("query status: %v", err)
				}
				var view shop.View
				if err := v.Get(&view); err != nil {
					t.Fatal(err)
				}
				if view.Status != shop.StatusAwaitingPayment || !view.NeedsAttention || view.Reason == nil {
					t.Errorf("after a wrong payment: %+v, want still awaiting payment, flagged with a reason", view)
				}
			}, 2*time.Minute)

			v := f.run(in)

			if v.Status != shop.StatusExpired || !v.NeedsAttention {
				t.Fatalf("status %s attention %v, want expired and flagged", v.Status, v.NeedsAttention)
			}
			if f.orders(in.CheckoutID) != 0 {
				t.Error("an order was confirmed for the wrong amount")
			}
			if l := f.level(phone); l.Available != 10 || l.Held != 0 {
				t.Errorf("phone: %+v, want all 10 available again", l)
			}
			if len(f.refunds) != 1 || f.refunds[0].PaymentRef != p.PaymentRef || f.refunds[0].AmountCents != p.AmountCents {
				t.Errorf("refunds %+v, want the wrong payment %s refunded", f.refunds, p.PaymentRef)
			}
		})
	}
}

func TestTransientRedisAndPostgresErrorsAreRetried(t *testing.T) {
	f, phone, in := phoneCheckout(t, 2)
	var reserveCalls, confirmCalls atomic.Int32
	// First attempt of each step fails as a dropped connection would; later attempts run
	// the real activity against the real stores.
	f.env.OnActivity(f.acts.ReserveStock, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in steps.StockInput) (lua.ReserveResult, error) {
			if reserveCalls.Add(1) == 1 {
				return lua.ReserveResult{}, errors.New("run reserve script: read tcp 127.0.0.1:6379: connection reset by peer")
			}
			return f.acts.ReserveStock(ctx, in)
		})
	f.env.OnActivity(f.acts.ConfirmOrder, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in steps.ConfirmOrderInput) (string, error) {
			if confirmCalls.Add(1) == 1 {
				return "", errors.New("insert order: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
			}
			return f.acts.ConfirmOrder(ctx, in)
		})
	f.payAt(time.Minute, paid("evt_1", 199_800))

	v := f.run(in)

	if v.Status != shop.StatusConfirmed {
		t.Fatalf("status %s, want confirmed after retries", v.Status)
	}
	if reserveCalls.Load() != 2 || confirmCalls.Load() != 2 {
		t.Errorf("reserve ran %d times, confirm %d times; want 2 each (one failure, one retry)", reserveCalls.Load(), confirmCalls.Load())
	}
	if p := f.level(phone); p.Sold != 2 || p.Held != 0 {
		t.Errorf("phone: %+v, want 2 sold and nothing held", p)
	}
}

// A half-succeeded reserve: the real script ran in Redis and took the hold, then the
// activity reported a failure (the reply was lost, the worker's deadline passed). This is why
// the saga registers each release before its reserve runs: had it registered the release
// only after a successful reserve, this hold would stay taken after the saga ended.
func TestReserveThatHeldButReportedFailureIsReleasedWhenTheSagaEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(attempt int32) error // nil: report the real result
		want shop.Status
		held int64 // after the reservation was answered
	}{
		{"failure for good", func(int32) error {
			return temporal.NewNonRetryableApplicationError("reserve reply lost", "ReplyLost", nil)
		}, shop.StatusFailed, 0},
		{"failure once, then a retry", func(attempt int32) error {
			if attempt == 1 {
				return errors.New("run reserve script: read tcp 127.0.0.1:6379: i/o timeout")
			}
			return nil
		}, shop.StatusExpired, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, phone, in := phoneCheckout(t, 2)
			in.PaymentTimeoutSeconds = 60
			var attempts atomic.Int32
			f.env.OnActivity(f.acts.ReserveStock, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, s steps.StockInput) (lua.ReserveResult, error) {
					res, err := f.acts.ReserveStock(ctx, s) // the script runs for real
					if err != nil {
						return res, err
					}
					if err := tc.fail(attempts.Add(1)); err != nil {
						return lua.ReserveResult{}, err
					}
					return res, nil
				})
			var heldWhileOpen int64 = -1
			f.env.RegisterDelayedCallback(func() { heldWhileOpen = f.level(phone).Held }, 30*time.Second)

			v := f.run(in)

			if v.Status != tc.want {
				t.Fatalf("status %s, want %s", v.Status, tc.want)
			}
			if tc.want != shop.StatusFailed && heldWhileOpen != tc.held {
				t.Errorf("held while waiting for payment: %d, want %d (the retry found its own hold)", heldWhileOpen, tc.held)
			}
			if p := f.level(phone); p.Held != 0 || p.Available != 10 {
				t.Errorf("after the saga ended %s: %+v, want nothing held and all 10 available", v.Status, p)
			}
			if held, err := f.stock.Holds(context.Background(), phone); err != nil || len(held) != 0 {
				t.Errorf("holds of %s after the saga ended: %v (err %v), want none", phone, held, err)
			}
		})
	}
}

func TestUnknownSKUFailsWithoutHolding(t *testing.T) {
	f := newFixture(t)
	phone := f.sku(10, 99_900, 2)
	in := input(shop.Item{SKU: phone, Quantity: 1}, shop.Item{SKU: "NOPE-" + phone, Quantity: 1})
	res := f.reserveAt(0, "req-1")

	v := f.run(in)

	if v.Status != shop.StatusFailed || res.RejectCode != shop.RejectUnknownSKU {
		t.Fatalf("status %s reject %q, want failed/unknown_sku", v.Status, res.RejectCode)
	}
	if p := f.level(phone); p.Held != 0 || p.Available != 10 {
		t.Errorf("phone: %+v, want untouched", p)
	}
}

// The reservation update refuses a request with another body (by its hash) before it enters
// the history: under the saga's own key as IdempotencyKeyReused, under another as
// CheckoutExists. The same body, and a request naming no body (an older API), are taken.
func TestReservationOfAnotherBodyIsRefusedBeforeTheHistory(t *testing.T) {
	f, _, in := phoneCheckout(t, 1)
	in.IdempotencyKey = "key-1"
	outcomes := map[string]string{}
	send := func(at time.Duration, name string, req workflows.ReservationRequest) {
		f.env.RegisterDelayedCallback(func() {
			f.env.UpdateWorkflow(workflows.UpdateReservation, name, &testsuite.TestUpdateCallback{
				OnAccept: func() { outcomes[name] = "accepted" },
				OnReject: func(err error) {
					var appErr *temporal.ApplicationError
					if errors.As(err, &appErr) {
						outcomes[name] = "refused " + appErr.Type()
					} else {
						outcomes[name] = "refused: " + err.Error()
					}
				},
				OnComplete: func(any, error) {},
			}, req)
		}, at)
	}
	send(0, "first", workflows.ReservationRequest{RequestID: "req-1", RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey})
	send(time.Minute, "retry", workflows.ReservationRequest{RequestID: "req-2", RequestHash: in.RequestHash, IdempotencyKey: "key-2"})
	send(time.Minute, "older API", workflows.ReservationRequest{RequestID: "req-3"})
	send(time.Minute, "other body, other key", workflows.ReservationRequest{RequestID: "req-4", RequestHash: "other", IdempotencyKey: "key-4"})
	send(time.Minute, "other body, its key", workflows.ReservationRequest{RequestID: "req-5", RequestHash: "other", IdempotencyKey: in.IdempotencyKey})

	if v := f.run(in); v.Status != shop.StatusExpired {
		t.Fatalf("status %s, want expired (nobody paid)", v.Status)
	}
	want := map[string]string{
		"first": "accepted", "retry": "accepted", "older API": "accepted",
		"other body, other key": "refused " + shop.ErrTypeCheckoutExists,
		"other body, its key":   "refused " + shop.ErrTypeIdempotencyKeyReused,
	}
	for name, w := range want {
		if outcomes[name] != w {
			t.Errorf("%s: %q, want %q", name, outcomes[name], w)
		}
	}
}

// A payment that arrives while the checkout's ending steps wait (a store is down, or support
// paused the step in the Web UI, which stops its retries until someone unpauses it) cannot
// be kept: the checkout has chosen its end. It is refunded at once, not once the end is
// recorded, however long that takes.
func TestAPaymentWhileTheEndIsStuckIsRefundedAtOnce(t *testing.T) {
	f := newRealFixture(t)
	var refundedAt time.Time
	f.env.OnWorkflow(workflows.Refund, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.RefundInput) (workflows.RefundView, error) {
			f.refunds = append(f.refunds, in)
			refundedAt = workflow.Now(ctx)
			return workflows.RefundView{RefundInput: in, Status: workflows.RefundRefunded}, nil
		})
	phone := f.sku(10, 99_900, 2)
	in := input(shop.Item{SKU: phone, Quantity: 1})
	in.PaymentTimeoutSeconds = 600
	recordedAfter := f.env.Now().Add(10*time.Minute + 3*time.Hour)
	f.env.OnActivity(f.acts.RecordOutcome, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in steps.RecordOutcomeInput) (*shop.CheckoutRecord, error) {
			if f.env.Now().Before(recordedAfter) {
				return nil, errors.New("record outcome: dial tcp 127.0.0.1:5432: connect: connection refused")
			}
			return f.acts.RecordOutcome(ctx, in)
		})
	f.payAt(11*time.Minute, paid("evt_late", 99_900))

	v := f.run(in)

	if v.Status != shop.StatusExpired {
		t.Fatalf("status %s, want expired", v.Status)
	}
	if len(f.refunds) != 1 || f.refunds[0].PaymentRef != "pi_evt_late" {
		t.Fatalf("refunds %+v, want the late payment refunded once", f.refunds)
	}
	if !refundedAt.Before(recordedAfter) {
		t.Errorf("the late payment was refunded at %s, once the end was recorded (%s): want it at once", refundedAt, recordedAfter)
	}
}

package workflows_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The Refund workflow runs with the real RefundPayment activity and the real Stripe client,
// pointed at a local Stripe API that keeps refunds and honours idempotency keys.

func refundFixture(t *testing.T) (*fixture, *stripetest.Server, workflows.RefundInput) {
	f := newRealFixture(t)
	stripe := stripetest.New(t)
	f.acts.Payments = map[string]payments.Provider{"stripe": payments.NewStripe(stripe.Key(), payments.WithStripeAPIURL(stripe.URL()))}
	pi := stripe.AddIntent("c-late", "succeeded", 99_900, "usd")
	f.recordPayment("c-late", shop.Payment{Provider: "stripe", EventID: "evt_late", Outcome: shop.PaymentSucceeded, PaymentRef: pi, AmountCents: 99_900, Currency: "usd"})
	return f, stripe, workflows.RefundInput{CheckoutID: "c-late", CustomerID: "u-9", Provider: "stripe", PaymentRef: pi,
		EventID: "evt_late", AmountCents: 99_900, Currency: "usd", Reason: "payment arrived after the checkout was expired"}
}

func (f *fixture) refundStatus(t *testing.T, key string) string {
	var status string
	if err := f.pool.QueryRow(context.Background(), `SELECT status FROM refunds WHERE refund_key = $1`, key).Scan(&status); err != nil {
		t.Fatalf("read refund %s: %v", key, err)
	}
	return status
}

func TestRefundIssuedOnce(t *testing.T) {
	f, stripe, in := refundFixture(t)

	f.env.ExecuteWorkflow(workflows.Refund, in)
	var v workflows.RefundView
	if err := f.env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}

	if v.Status != workflows.RefundRefunded || v.ProviderRefundID == "" {
		t.Fatalf("refund %+v, want refunded with the provider's id", v)
	}
	refunds := stripe.Refunds()
	if len(refunds) != 1 || refunds[0].PaymentIntent != in.PaymentRef || refunds[0].Amount != 99_900 {
		t.Errorf("stripe has refunds %+v, want one full refund of %s", refunds, in.PaymentRef)
	}
	if got := stripe.Requests()[0].Header.Get("Idempotency-Key"); got != workflows.RefundIdempotencyKey(in) {
		t.Errorf("Idempotency-Key %q, want %q", got, workflows.RefundIdempotencyKey(in))
	}
	if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundRefunded {
		t.Errorf("postgres records the refund as %q", s)
	}
}

// A refund of the payment that paid an order asks the provider nothing: the payment is the
// order's. (A run of the saga can judge the order's payment late, when an earlier attempt of
// its workflow task confirmed the order in a local activity and the attempt was lost; the
// payment was then both ordered and refunded.)
func TestRefundOfThePaymentOfAnOrderKeepsIt(t *testing.T) {
	f, stripe, in := refundFixture(t)
	ctx := context.Background()
	sku := f.sku(10, 99_900, 1)
	items := []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 99_900}}
	if _, err := f.acts.Store.InsertCheckout(ctx, shop.CheckoutRecord{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID,
		Currency: "usd", AmountCents: 99_900, Items: items}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.acts.Store.ConfirmOrder(ctx, store.Order{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID, Items: items,
		AmountCents: 99_900, Currency: "usd", PaymentProvider: "stripe", PaymentRef: in.PaymentRef}); err != nil {
		t.Fatal(err)
	}

	f.env.ExecuteWorkflow(workflows.Refund, in)
	var v workflows.RefundView
	if err := f.env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}
	if v.Status != workflows.RefundKept {
		t.Errorf("refund %+v, want kept", v)
	}
	if n := f.errorsLogged.Load(); n != 0 {
		t.Errorf("%d records logged at Error for a payment kept as it should be, want none", n)
	}
	if refunds := stripe.Refunds(); len(refunds) != 0 {
		t.Errorf("stripe has refunds %+v, want none", refunds)
	}
	var n int
	if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM refunds WHERE payment_ref = $1`, in.PaymentRef).Scan(&n); err != nil || n != 0 {
		t.Errorf("postgres has %d refunds of the order's payment (%v), want none", n, err)
	}
}

// The other order of the same race: a payment whose refund an earlier run recorded (it
// judged the payment late, then support reset the saga) confirms no order when this run
// meets it. The money is going back, so the checkout fails, its holds go back for sale, and
// no second refund is asked.
func TestAPaymentBeingRefundedConfirmsNoOrder(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	f.reserveAt(0, "req-1")
	p := paid("evt_refunded", 99_900)
	f.env.RegisterDelayedCallback(func() {
		f.recordPayment(f.checkoutID, p)
		r := workflows.RefundOf(in.CheckoutID, in.CustomerID, p, "payment arrived after the checkout was cancelled")
		if err := f.acts.Store.RecordRefund(context.Background(), store.Refund{ID: workflows.RefundIdempotencyKey(r),
			CheckoutID: r.CheckoutID, Provider: r.Provider, PaymentRef: r.PaymentRef, AmountCents: r.AmountCents,
			Currency: r.Currency, Reason: r.Reason, Status: workflows.RefundRequested}); err != nil {
			t.Errorf("record the earlier run's refund: %v", err)
		}
		f.env.SignalWorkflow(workflows.SignalPayment, p)
	}, 2*time.Minute)

	v := f.run(in)

	if v.Status != shop.StatusFailed || !strings.Contains(deref(v.Reason), "is being refunded") || f.orders(in.CheckoutID) != 0 || len(f.refunds) != 0 {
		t.Errorf("ended %s (reason %q) with %d orders and %d refunds asked, want failed with none",
			v.Status, deref(v.Reason), f.orders(in.CheckoutID), len(f.refunds))
	}
	if lv := f.level(phone); lv.Held != 0 || lv.Sold != 0 || lv.Available != 10 {
		t.Errorf("phone available %d held %d sold %d, want 10 available, none held or sold", lv.Available, lv.Held, lv.Sold)
	}
}

func TestRefundRefusedWaitsForSupport(t *testing.T) {
	f, stripe, in := refundFixture(t)
	stripe.FailNextRefunds(stripetest.Answer{Status: 400, ErrType: "invalid_request_error", Code: "charge_disputed", Message: "Charge has been charged back."})
	var stuck workflows.RefundView
	f.env.RegisterDelayedCallback(func() {
		v, err := f.env.QueryWorkflow(workflows.QueryStatus)
		if err == nil {
			_ = v.Get(&stuck)
		}
		if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundStuck {
			t.Errorf("postgres records the stuck refund as %q", s)
		}
	}, time.Hour)
	retry := f.updateAt(2*time.Hour, workflows.UpdateRetry, "r1", workflows.RetryRequest{})

	f.env.ExecuteWorkflow(workflows.Refund, in)
	var v workflows.RefundView
	if err := f.env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}

	if stuck.Status != workflows.RefundStuck || !strings.Contains(stuck.Attention, "charge_disputed") {
		t.Errorf("while refused: %+v, want stuck with the provider's reason", stuck)
	}
	if retry.rejected != nil || v.Status != workflows.RefundRefunded || len(stripe.Refunds()) != 1 {
		t.Errorf("after support's retry: %+v (retry %+v), stripe refunds %d; want refunded once", v, retry, len(stripe.Refunds()))
	}
}

// revokedUntilRecovered is the Stripe provider whose API key was revoked: its first
// `revoked` refund requests go out with a key the local Stripe answers 401 to (retried, like a
// database outage: an operator must fix it), the later ones with the real key. Both are the
// real Stripe client against the same local Stripe.
type revokedUntilRecovered struct {
	payments.Provider
	revoked   payments.Provider
	remaining atomic.Int64
}

func (p *revokedUntilRecovered) Refund(ctx context.Context, r payments.RefundRequest) (payments.Refund, error) {
	if p.remaining.Add(-1) >= 0 {
		return p.revoked.Refund(ctx, r)
	}
	return p.Provider.Refund(ctx, r)
}

// TestRefundFailingForDaysContinuesAsNew: a refund whose provider key stays revoked for more
// than a day of rounds must not grow one history without bound (the server terminates a
// workflow at 51,200 events, about 3 weeks of rounds). Each run ends in continue-as-new after
// a bounded number of rounds, carrying the idempotency key and the stuck state; NeedsAttention
// is set once, not once per round; and the chain refunds once the key works again.
func TestRefundFailingForDaysContinuesAsNew(t *testing.T) {
	f, stripe, in := refundFixture(t)
	// 250 failing rounds of ten attempts each: about 29 hours of a revoked key.
	const failing = 2_500
	// maxRoundsPerRun is the bound promised per run: ~11 events a round keeps a run under
	// about 1,700 events.
	const maxRoundsPerRun = 150
	p := &revokedUntilRecovered{
		Provider: f.acts.Payments["stripe"],
		revoked:  payments.NewStripe("sk_test_revoked", payments.WithStripeAPIURL(stripe.URL())),
	}
	p.remaining.Store(failing)
	f.acts.Payments = map[string]payments.Provider{"stripe": p}

	env, input, runs := f.newEnv(), in, 0
	var v workflows.RefundView
	for {
		runs++
		if runs > failing/10/maxRoundsPerRun+5 {
			t.Fatalf("still running after %d runs", runs)
		}
		var upserts []temporal.SearchAttributes
		env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
			upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
		})
		before := len(stripe.Requests())
		env.ExecuteWorkflow(workflows.Refund, input)
		rounds := (len(stripe.Requests()) - before + 9) / 10
		if rounds > maxRoundsPerRun {
			t.Errorf("run %d made %d rounds of requests, want at most %d before continuing as new", runs, rounds, maxRoundsPerRun)
		}
		if !env.IsWorkflowCompleted() {
			t.Fatalf("run %d did not complete", runs)
		}
		if needs := countNeedsAttention(upserts, true); needs > 1 {
			t.Errorf("run %d set NeedsAttention %d times, want at most once (only when it changes)", runs, needs)
		}
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			if err != nil {
				t.Fatalf("run %d: %v", runs, err)
			}
			if err := env.GetWorkflowResult(&v); err != nil {
				t.Fatal(err)
			}
			break
		}
		// The next run: what the server would start from the continue-as-new command.
		// The carried state is read as the server stores it (JSON), which running refunds
		// depend on: renaming a field would make their next run forget the key.
		var next workflows.RefundInput
		var carried struct {
			Continued *struct {
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"continued"`
		}
		dc := converter.GetDefaultDataConverter()
		if err := errors.Join(dc.FromPayloads(can.Input, &next), dc.FromPayloads(can.Input, &carried)); err != nil {
			t.Fatalf("decode continue-as-new input: %v", err)
		}
		if next.PaymentRef != in.PaymentRef || carried.Continued == nil || carried.Continued.IdempotencyKey != workflows.RefundIdempotencyKey(in) {
			t.Fatalf("run %d continued with %+v, want the same payment and key %s", runs, next, workflows.RefundIdempotencyKey(in))
		}
		if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundStuck {
			t.Errorf("between runs postgres records the refund as %q, want stuck", s)
		}
		env, input = f.newEnv(), next
	}

	t.Logf("refunded after %d runs and %d requests", runs, len(stripe.Requests()))
	if runs < 2 {
		t.Errorf("the refund failed for %d requests in one run, want it to continue as new", failing)
	}
	if v.Status != workflows.RefundRefunded || len(stripe.Refunds()) != 1 {
		t.Errorf("after the key works again: %+v, stripe refunds %d; want refunded once", v, len(stripe.Refunds()))
	}
	if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundRefunded {
		t.Errorf("postgres records the refund as %q", s)
	}
}

func countNeedsAttention(upserts []temporal.SearchAttributes, value bool) int {
	n := 0
	for _, sa := range upserts {
		if got, ok := sa.GetBool(workflows.AttrNeedsAttention); ok && got == value {
			n++
		}
	}
	return n
}

// newEnv is a time-skipping environment over the fixture's activities, one per run of a
// workflow that continues as new (the test environment runs one run only). It logs nothing
// below an error's level plus one: the 2,500 activity errors the test expects would drown
// its output.
func (f *fixture) newEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))))
	env := s.NewTestWorkflowEnvironment()
	worker.Register(env, f.acts)
	return env
}

// Refund workflow ids: one per payment, and never the same for two payments. Provider names
// may contain '-' and '_' (never ':', see api.ParseStandardWebhookSecrets), and refs may
// contain anything (Standard Webhooks refs are free text).
func TestRefundWorkflowIDNamesOnePayment(t *testing.T) {
	payments := [][2]string{ // provider, ref
		{"pay", "x-1"}, {"pay-x", "1"},
		{"pay", "x:1"}, {"pay", "x-1:"}, {"pay-x", ":1"},
		{"a_b", "c"}, {"a", "b_c"}, {"a", "_b_c"},
		{"stripe", "pi_3Nx"}, {"stripe", "pi_3Nx/../x y"}, {"stripe", ":x"},
		{"pay-x", "-1"}, {"pay", "x--1"}, {"pay", "x:-1"}, {"pay-x", "1:"},
	}
	seen := map[string][2]string{}
	for _, p := range payments {
		id := workflows.RefundWorkflowID(p[0], p[1])
		if other, dup := seen[id]; dup {
			t.Errorf("payments %v and %v share refund workflow id %q", other, p, id)
		}
		seen[id] = p
	}
	// Stripe refunds keep the id running sagas started them under (and support's runbook shows).
	if got := workflows.RefundWorkflowID("stripe", "pi_3Nx"); got != "refund-stripe-pi_3Nx" {
		t.Errorf("stripe refund id %q, want refund-stripe-pi_3Nx", got)
	}
}

package activities

// These tests run the activities against a real Postgres (a fresh, migrated database per
// test) and a real Redis, from internal/testenv. The store's own SQL is proven in package
// store's tests, the operators' changes in package inventory's.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// The activities' tests use the same real services as every other package (internal/testenv).
func randomID(prefix string) string { return testenv.RandomID(prefix) }

func testDB(t *testing.T) *pgxpool.Pool {
	_, pool := testenv.Postgres(t)
	return pool
}

// recordingActivities are the activities over a fresh database and no Redis: enough for
// the steps that only record (RecordCheckout prices the cart from the pool's catalog).
func recordingActivities(t *testing.T) (*pgxpool.Pool, *Activities) {
	pool := testDB(t)
	return pool, &Activities{Store: store.New(pool)}
}

// newSKU puts a new SKU, named prefix plus a random suffix, in the catalog: 10 on hand at
// priceCents in currency.
func newSKU(t *testing.T, pool *pgxpool.Pool, prefix string, priceCents int64, currency string) string {
	sku := randomID(prefix)
	testenv.PutSKU(t, pool, sku, 10, priceCents, currency)
	return sku
}

func testRedis(t *testing.T) *redis.Client { return testenv.Redis(t) }

func requireAppError(t *testing.T, err error, wantType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("error = %v (%T), want a temporal ApplicationError of type %s", err, err, wantType)
	}
	if appErr.Type() != wantType {
		t.Errorf("error type = %q, want %q (error: %v)", appErr.Type(), wantType, err)
	}
	if !appErr.NonRetryable() {
		t.Errorf("error %v is retryable, want non-retryable", err)
	}
}

func TestRecordCheckoutPricesFromCatalogOnce(t *testing.T) {
	t.Parallel()
	pool, a := recordingActivities(t)
	skuA, skuB := newSKU(t, pool, "A-", 250, "usd"), newSKU(t, pool, "B-", 1000, "usd")

	in := steps.RecordCheckoutInput{
		CheckoutID: randomID("c-"),
		CustomerID: "u-1",
		// The client's prices are ignored: the catalog prices the cart.
		Items: []shop.Item{{SKU: skuA, Quantity: 3, UnitPriceCents: 1}, {SKU: skuB, Quantity: 1, UnitPriceCents: 1}},
	}
	first, err := a.RecordCheckout(t.Context(), in)
	if err != nil {
		t.Fatalf("record checkout: %v", err)
	}
	if first.CheckoutID != in.CheckoutID || first.CustomerID != "u-1" || first.Status != shop.RecordOpen ||
		first.Currency != "usd" || first.AmountCents != 3*250+1000 {
		t.Errorf("recorded %+v; want checkout %s of u-1, status open, usd, 1750 cents", first, in.CheckoutID)
	}
	wantItems := map[string]shop.Item{
		skuA: {SKU: skuA, Quantity: 3, UnitPriceCents: 250},
		skuB: {SKU: skuB, Quantity: 1, UnitPriceCents: 1000},
	}
	if len(first.Items) != len(wantItems) {
		t.Fatalf("recorded items %+v, want %+v", first.Items, wantItems)
	}
	for _, it := range first.Items {
		if it != wantItems[it.SKU] {
			t.Errorf("recorded item %+v, want %+v", it, wantItems[it.SKU])
		}
	}
	if first.EndedAt != nil || first.OrderID != "" || first.CreatedAt.IsZero() {
		t.Errorf("new checkout has ended_at %v, order %q, created_at %v", first.EndedAt, first.OrderID, first.CreatedAt)
	}

	// A retry after the price changed still sees the cart as first recorded.
	testenv.PutSKU(t, pool, skuA, 10, 999, "usd")
	again, err := a.RecordCheckout(t.Context(), in)
	if err != nil {
		t.Fatalf("record checkout again: %v", err)
	}
	if again.AmountCents != first.AmountCents || !again.CreatedAt.Equal(first.CreatedAt) ||
		fmt.Sprint(again.Items) != fmt.Sprint(first.Items) {
		t.Errorf("second record = %+v, want the first %+v", again, first)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM checkouts WHERE checkout_id = $1`, in.CheckoutID); n != 1 {
		t.Errorf("%d checkout rows, want 1", n)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM checkout_items WHERE checkout_id = $1`, in.CheckoutID); n != 2 {
		t.Errorf("%d checkout item rows, want 2", n)
	}
}

func TestRecordCheckoutRefusesUnknownSKUAndMixedCurrency(t *testing.T) {
	t.Parallel()
	pool, a := recordingActivities(t)
	usd, eur := newSKU(t, pool, "USD-", 100, "usd"), newSKU(t, pool, "EUR-", 100, "eur")

	tests := []struct {
		name     string
		items    []shop.Item
		wantType string
	}{
		{"unknown sku", []shop.Item{{SKU: usd, Quantity: 1}, {SKU: randomID("NOPE-"), Quantity: 1}}, shop.ErrTypeUnknownSKU},
		{"mixed currency", []shop.Item{{SKU: usd, Quantity: 1}, {SKU: eur, Quantity: 1}}, shop.ErrTypeMixedCurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := randomID("c-")
			_, err := a.RecordCheckout(t.Context(), steps.RecordCheckoutInput{CheckoutID: id, CustomerID: "u-1", Items: tt.items})
			requireAppError(t, err, tt.wantType)
			if _, err := a.Store.Checkout(t.Context(), id); !errors.Is(err, shop.ErrNotFound) {
				t.Errorf("refused checkout was recorded: read it back with err %v, want shop.ErrNotFound", err)
			}
		})
	}
}

// Postgres holding fewer units than an order needs (store.ErrInsufficientOnHand) is a "no"
// the saga branches on, not an error Temporal retries. The activity returns before
// activity.GetLogger on this path, so it runs outside a worker.
func TestConfirmOrderRefusesAStockMismatchForGood(t *testing.T) {
	t.Parallel()
	a, _, confirm := confirmable(t, 1, 2, "fakepay", "pay-1")
	recordPayment(t, a, confirm)
	_, err := a.ConfirmOrder(t.Context(), confirm)
	requireAppError(t, err, shop.ErrTypeStockMismatch)
}

// confirmable records a checkout of quantity units of a new SKU with onHand units, and returns
// the confirm of it by provider's payment ref.
func confirmable(t *testing.T, onHand, quantity int64, provider, ref string) (*Activities, *pgxpool.Pool, steps.ConfirmOrderInput) {
	t.Helper()
	pool := testDB(t)
	a := &Activities{Store: store.New(pool)}
	sku := randomID("A-")
	testenv.PutSKU(t, pool, sku, onHand, 300, "usd")
	rec, err := a.RecordCheckout(t.Context(), steps.RecordCheckoutInput{CheckoutID: randomID("c-"), CustomerID: "u-2", Items: []shop.Item{{SKU: sku, Quantity: quantity}}})
	if err != nil {
		t.Fatalf("record checkout: %v", err)
	}
	return a, pool, steps.ConfirmOrderInput{CheckoutID: rec.CheckoutID, CustomerID: rec.CustomerID, Items: rec.Items,
		AmountCents: rec.AmountCents, Currency: rec.Currency, PaymentProvider: provider, PaymentRef: ref}
}

// recordPayment stores the payment of in as the verified event a webhook records.
func recordPayment(t *testing.T, a *Activities, in steps.ConfirmOrderInput) {
	t.Helper()
	if _, err := a.Store.RecordPaymentEvent(t.Context(), verifiedEvent(in)); err != nil {
		t.Fatal(err)
	}
}

// verifiedEvent is the event a webhook records for the payment of in.
func verifiedEvent(in steps.ConfirmOrderInput) shop.PaymentEvent {
	return shop.PaymentEvent{Provider: in.PaymentProvider, EventID: "evt-" + in.CheckoutID + "-" + in.PaymentRef,
		Type: "test", CheckoutID: in.CheckoutID, PaymentRef: in.PaymentRef, AmountCents: in.AmountCents, Currency: in.Currency,
		Outcome: string(shop.PaymentSucceeded), Payload: []byte("{}")}
}

// A payment signal sent to Temporal from outside the product (the Web UI, the CLI) names a
// payment no verified webhook recorded: it confirms nothing. Nor does a recorded payment of
// another checkout, or of another amount.
func TestConfirmOrderRefusesAPaymentNoVerifiedEventRecorded(t *testing.T) {
	t.Parallel()
	a, pool, confirm := confirmable(t, 5, 1, "stripe", "pi_forged")
	_, err := a.ConfirmOrder(t.Context(), confirm)
	requireAppError(t, err, shop.ErrTypeUnverifiedPayment)

	other := confirm
	other.CheckoutID = "c-someone-else"
	recordPayment(t, a, other) // a real payment, of another checkout
	cheaper := confirm
	cheaper.PaymentRef, cheaper.AmountCents = "pi_cheaper", 1
	recordPayment(t, a, cheaper)
	cheaper.AmountCents = confirm.AmountCents
	for _, in := range []steps.ConfirmOrderInput{confirm, cheaper} {
		_, err = a.ConfirmOrder(t.Context(), in)
		requireAppError(t, err, shop.ErrTypeUnverifiedPayment)
	}
	var orders int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM orders WHERE checkout_id = $1`, confirm.CheckoutID).Scan(&orders); err != nil || orders != 0 {
		t.Fatalf("%d orders (%v), want none", orders, err)
	}

	// Once a webhook records it, the same payment is verified (the confirm itself logs
	// through the activity context, which this test does not have).
	recordPayment(t, a, confirm)
	if ok, err := a.Store.PaymentVerified(t.Context(), confirm.PaymentProvider, confirm.PaymentRef, confirm.CheckoutID, confirm.AmountCents, confirm.Currency); !ok || err != nil {
		t.Fatalf("the recorded payment verified: %v, %v", ok, err)
	}
}

// A saga asks about every payment event it is signalled: one a verified webhook recorded for
// the checkout is verified, whatever its outcome; one nobody recorded (a signal from the Web
// UI or the CLI) is not, and is counted.
func TestVerifyPaymentAnswersOnlyWhatAVerifiedEventRecorded(t *testing.T) {
	a, _, confirm := confirmable(t, 5, 1, "stripe", "pi_real")
	recordPayment(t, a, confirm)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	verify := func(p shop.Payment) bool {
		t.Helper()
		v, err := env.ExecuteActivity(a.VerifyPayment, steps.VerifyPaymentInput{CheckoutID: confirm.CheckoutID, Payment: p})
		var ok bool
		if err == nil {
			err = v.Get(&ok)
		}
		if err != nil {
			t.Fatalf("verify %s: %v", p.EventID, err)
		}
		return ok
	}
	recorded := shop.Payment{Provider: "stripe", EventID: "evt_any", Outcome: shop.PaymentSucceeded, PaymentRef: confirm.PaymentRef,
		AmountCents: confirm.AmountCents, Currency: confirm.Currency}
	before := testutil.ToFloat64(metrics.UnverifiedPayments)
	if !verify(recorded) {
		t.Error("the recorded payment is not verified")
	}
	forged := recorded
	forged.PaymentRef = "pi_forged"
	canceled := recorded
	canceled.Outcome = shop.PaymentCanceled
	for _, p := range []shop.Payment{forged, canceled} {
		if verify(p) {
			t.Errorf("%s %s verified, want not: no event recorded it", p.Outcome, p.PaymentRef)
		}
	}
	if n := testutil.ToFloat64(metrics.UnverifiedPayments) - before; n != 2 {
		t.Errorf("unverified payments counted %v, want 2", n)
	}
}

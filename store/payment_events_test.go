package store_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// A provider's event is recorded once however often it is delivered, and marked delivered
// once: the first disposition stays.
func TestPaymentEventIsRecordedOnceAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	ev := shop.PaymentEvent{
		Provider: "fakepay", EventID: testenv.RandomID("evt-"), Type: "payment.succeeded",
		CheckoutID: "c-1", PaymentRef: "pay-1", AmountCents: 1750, Currency: "usd",
		Payload: []byte(`{"id":"evt"}`),
	}
	check := func(step string, want shop.RecordedEvent) {
		t.Helper()
		got, err := s.RecordPaymentEvent(t.Context(), ev)
		if err != nil {
			t.Fatalf("%s: record event: %v", step, err)
		}
		if got != want {
			t.Errorf("%s: recorded %+v, want %+v", step, got, want)
		}
	}
	disposition := func() (string, *time.Time) {
		t.Helper()
		var d string
		var at *time.Time
		if err := pool.QueryRow(t.Context(), `SELECT disposition, delivered_at FROM payment_events WHERE provider = $1 AND event_id = $2`,
			ev.Provider, ev.EventID).Scan(&d, &at); err != nil {
			t.Fatalf("read event: %v", err)
		}
		return d, at
	}

	check("first", shop.RecordedEvent{New: true})
	check("redelivered before delivery", shop.RecordedEvent{New: false, Delivered: false})
	if d, at := disposition(); d != "pending" || at != nil {
		t.Errorf("undelivered event: disposition %q, delivered_at %v; want pending, null", d, at)
	}
	if err := s.MarkPaymentEventDelivered(t.Context(), ev.Provider, ev.EventID, shop.DispositionSignalled); err != nil {
		t.Fatalf("mark delivered: %v", err)
	}
	check("redelivered after delivery", shop.RecordedEvent{New: false, Delivered: true})
	d1, at1 := disposition()
	if d1 != shop.DispositionSignalled || at1 == nil {
		t.Fatalf("delivered event: disposition %q, delivered_at %v; want %s, set", d1, at1, shop.DispositionSignalled)
	}
	if err := s.MarkPaymentEventDelivered(t.Context(), ev.Provider, ev.EventID, shop.DispositionLate); err != nil {
		t.Fatalf("mark delivered again: %v", err)
	}
	if d2, at2 := disposition(); d2 != shop.DispositionSignalled || at2 == nil || !at2.Equal(*at1) {
		t.Errorf("after a second mark: disposition %q, delivered_at %v; want the first (%s, %v)", d2, at2, d1, at1)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM payment_events`); n != 1 {
		t.Errorf("%d payment events, want 1", n)
	}
}

// PaymentFates names the payments of a checkout that Postgres already gave an end: routed to
// a refund (a refund recorded for it, an orphan the sweep claimed, a payment that came after
// its checkout ended), or paying its order. A payment delivered to its saga, or another
// checkout's or provider's, is not.
func TestPaymentFatesNameThePaymentsRefundedOrOrdered(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	ctx := t.Context()
	_, _, rec := recordCart(t, pool, 5, 5, 1, 1)
	mustConfirm(t, s, rec) // paid by fakepay payment pay-1
	event := func(checkoutID, provider, ref, disposition string) {
		t.Helper()
		ev := shop.PaymentEvent{Provider: provider, EventID: testenv.RandomID("evt-"), Type: "payment.succeeded",
			CheckoutID: checkoutID, PaymentRef: ref, AmountCents: 1000, Currency: "usd", Outcome: string(shop.PaymentSucceeded),
			Payload: []byte(`{}`)}
		if _, err := s.RecordPaymentEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkPaymentEventDelivered(ctx, provider, ev.EventID, disposition); err != nil {
			t.Fatal(err)
		}
	}
	event(rec.CheckoutID, "fakepay", "pay-1", shop.DispositionSignalled)
	event(rec.CheckoutID, "fakepay", "pay-swept", shop.DispositionOrphanRefund)
	event(rec.CheckoutID, "fakepay", "pay-late", shop.DispositionLate)
	event(rec.CheckoutID, "fakepay", "pay-signalled", shop.DispositionSignalled)
	event(rec.CheckoutID, "fakepay", "pay-orphan", shop.DispositionOrphan)
	event("c-other", "fakepay", "pay-other-checkout", shop.DispositionOrphanRefund)
	event(rec.CheckoutID, "acme", "pay-other-provider", shop.DispositionOrphanRefund)
	if err := s.RecordRefund(ctx, store.Refund{ID: "refund-" + rec.CheckoutID + "-pay-refunded", CheckoutID: rec.CheckoutID,
		Provider: "fakepay", PaymentRef: "pay-refunded", AmountCents: 1000, Currency: "usd", Reason: "wrong amount",
		Status: "requested"}); err != nil {
		t.Fatal(err)
	}

	got, err := s.PaymentFates(ctx, "fakepay", rec.CheckoutID, []string{"pay-1", "pay-swept", "pay-late", "pay-signalled",
		"pay-orphan", "pay-other-checkout", "pay-other-provider", "pay-refunded", "pay-unknown"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"pay-late", "pay-refunded", "pay-swept"}; !slices.Equal(got.Refunding, want) {
		t.Errorf("refunding %v, want %v", got.Refunding, want)
	}
	if want := []string{"pay-1"}; !slices.Equal(got.Ordered, want) {
		t.Errorf("ordered %v, want %v", got.Ordered, want)
	}
	if other, err := s.PaymentFates(ctx, "acme", rec.CheckoutID, []string{"pay-1"}); err != nil || other.Decided("pay-1") {
		t.Errorf("acme's pay-1: %+v, %v; want undecided: the order was paid by fakepay's", other, err)
	}
}

// A webhook's raw body (which can carry a buyer's email and address) is emptied once it is
// older than the retention; the columns the product reads stay, and a payment stays verified.
func TestOldPaymentPayloadsAreEmptiedAndTheirFactsKept(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	old := shop.PaymentEvent{Provider: "stripe", EventID: testenv.RandomID("evt-"), Type: "payment_intent.succeeded",
		CheckoutID: "c-old", PaymentRef: "pi_old", AmountCents: 1750, Currency: "usd", Outcome: "succeeded",
		Payload: []byte(`{"receipt_email":"buyer@example.com"}`)}
	fresh := old
	fresh.EventID, fresh.CheckoutID, fresh.PaymentRef = testenv.RandomID("evt-"), "c-new", "pi_new"
	for _, ev := range []shop.PaymentEvent{old, fresh} {
		if _, err := s.RecordPaymentEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(t.Context(), `UPDATE payment_events SET received_at = now() - interval '31 days' WHERE event_id = $1`, old.EventID); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgePaymentPayloads(t.Context(), 30*24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("purge = %d, %v; want the old event's payload emptied", n, err)
	}
	payload := func(id string) string {
		var p string
		if err := pool.QueryRow(t.Context(), `SELECT payload::text FROM payment_events WHERE event_id = $1`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := payload(old.EventID); p != "{}" {
		t.Errorf("old payload %s, want {}", p)
	}
	if p := payload(fresh.EventID); p == "{}" {
		t.Errorf("the fresh payload was emptied")
	}
	if ok, err := s.PaymentVerified(t.Context(), "stripe", "pi_old", "c-old", 1750, "usd"); !ok || err != nil {
		t.Errorf("the old payment no longer verified: %v, %v", ok, err)
	}
	if n, err := s.PurgePaymentPayloads(t.Context(), 30*24*time.Hour); err != nil || n != 0 {
		t.Errorf("a second purge = %d, %v; want nothing left to empty", n, err)
	}
}

// Every confirm and refund asks whether a verified event recorded its payment, and a flash
// sale records one event or more per buyer. With 20,000 events, the plan Postgres settles on
// for each question (its generic plan, which a prepared statement uses once it costs no more
// than a fresh one) reads payment_events by index. The refund's question names no checkout:
// before payment_events_payment_idx it read the whole table, 46 ms at 300,000 events.
func TestPaymentQuestionsReadEventsByIndex(t *testing.T) {
	t.Parallel()
	pool, _ := newStore(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `
		INSERT INTO payment_events (provider, event_id, event_type, checkout_id, payment_ref, amount_cents, currency, payload, outcome)
		SELECT 'stripe', 'evt_' || i, 'payment_intent.succeeded', 'c-' || i, 'pi_' || i, 1000, 'usd', '{}', 'succeeded'
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `ANALYZE payment_events; SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for i, q := range []struct{ name, sql, args string }{
		{"a refund's (any checkout)", store.PaymentVerifiedSQL, `'stripe', 'pi_77', '', 1000, 'usd', 'succeeded'`},
		{"a confirm's, when it wrote nothing", store.PaymentVerifiedSQL, `'stripe', 'pi_77', 'c-77', 1000, 'usd', 'succeeded'`},
		{"a saga's, of a failed attempt", store.PaymentVerifiedSQL, `'stripe', 'pi_77', 'c-77', 1000, 'usd', 'failed'`},
		{"the confirm", store.ConfirmOrderSQL, `'o-77', 'c-77', 'u-1', 1000, 'usd', 'stripe', 'pi_77', '{A}', '{1}', '{1000}', NULL`},
	} {
		name := fmt.Sprintf("q%d", i)
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+q.sql); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan string
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+q.args+")").Scan(&plan); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		if scans := seqScans(t, plan, "payment_events"); scans > 0 {
			t.Errorf("%s question reads all of payment_events (%d sequential scans):\n%s", q.name, scans, plan)
		}
	}
}

// seqScans counts the sequential scans of table in a JSON plan (EXPLAIN (FORMAT JSON)).
func seqScans(t *testing.T, plan, table string) int {
	t.Helper()
	var nodes []any
	if err := json.Unmarshal([]byte(plan), &nodes); err != nil {
		t.Fatalf("read the plan: %v", err)
	}
	n := 0
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["Node Type"] == "Seq Scan" && v["Relation Name"] == table {
				n++
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(nodes)
	return n
}

// A saga asks whether a verified event recorded each payment event it is signalled, whatever
// its outcome: a failed attempt recorded for a checkout is verified as failed for that
// checkout only, and as nothing else.
func TestAPaymentOutcomeIsVerifiedOnlyAsRecorded(t *testing.T) {
	t.Parallel()
	_, s := newStore(t)
	checkout, ref := testenv.RandomID("c-"), testenv.RandomID("pi_")
	if _, err := s.RecordPaymentEvent(t.Context(), shop.PaymentEvent{
		Provider: "stripe", EventID: testenv.RandomID("evt_"), Type: "payment_intent.payment_failed", CheckoutID: checkout,
		PaymentRef: ref, AmountCents: 1750, Currency: "usd", Outcome: string(shop.PaymentFailed), Payload: []byte("{}"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name     string
		checkout string
		outcome  shop.PaymentKind
		want     bool
	}{
		{"failed, for its checkout", checkout, shop.PaymentFailed, true},
		{"canceled", checkout, shop.PaymentCanceled, false},
		{"succeeded", checkout, shop.PaymentSucceeded, false},
		{"failed, for another checkout", "c-other", shop.PaymentFailed, false},
	} {
		got, err := s.PaymentOutcomeVerified(t.Context(), "stripe", ref, q.checkout, q.outcome, 1750, "usd")
		if err != nil || got != q.want {
			t.Errorf("%s: verified %v, %v; want %v", q.name, got, err, q.want)
		}
	}
}

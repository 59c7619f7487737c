package store_test

import (
	"errors"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// A checkout id Postgres never recorded reads as shop.ErrNotFound.
func TestUnknownCheckoutIsNotFound(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	if _, err := store.New(pool).Checkout(t.Context(), testenv.RandomID("c-")); !errors.Is(err, shop.ErrNotFound) {
		t.Errorf("checkout of an unknown id: err = %v, want shop.ErrNotFound", err)
	}
}

// The end of a cart that ended in the waiting room is recorded once: a later end (the cart
// put back in line by a Redis that went back in time, and refused again) finds the first, and
// a cart a saga recorded stays the saga's.
func TestARoomEndIsRecordedOnceAndNeverOverASaga(t *testing.T) {
	_, pool := testenv.Postgres(t)
	s := store.New(pool)
	ctx := t.Context()
	sku := testenv.RandomID("SKU-")
	if err := s.CreateProduct(ctx, shop.Product{SKU: sku, OnHand: 5, PriceCents: 500, Currency: "usd", MaxPerOrder: 5}); err != nil {
		t.Fatal(err)
	}
	end := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "u-1", Status: string(shop.StatusCancelled),
		Currency: "usd", AmountCents: 1000, Reason: "cancelled while waiting",
		Items: []shop.Item{{SKU: sku, Quantity: 2, UnitPriceCents: 500}}}
	if got, err := s.RecordEnd(ctx, end); err != nil || got != string(shop.StatusCancelled) {
		t.Fatalf("first end: %q %v", got, err)
	}
	again := end
	again.Status = string(shop.StatusOutOfStock)
	if got, err := s.RecordEnd(ctx, again); err != nil || got != string(shop.StatusCancelled) {
		t.Fatalf("second end: %q %v, want the first (cancelled)", got, err)
	}
	rec, err := s.Checkout(ctx, end.CheckoutID)
	if err != nil || rec.Status != string(shop.StatusCancelled) || rec.EndedAt == nil || len(rec.Items) != 1 || rec.AmountCents != 1000 {
		t.Fatalf("recorded %+v %v", rec, err)
	}

	open := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "u-2", Currency: "usd", AmountCents: 500,
		Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 500}}}
	if _, err := s.InsertCheckout(ctx, open, nil); err != nil {
		t.Fatal(err)
	}
	open.Status = string(shop.StatusOutOfStock)
	if got, err := s.RecordEnd(ctx, open); err != nil || got != shop.RecordOpen {
		t.Fatalf("end over a saga's record: %q %v, want %q", got, err, shop.RecordOpen)
	}
}

// RecordedCheckouts names the recorded checkouts among the ids it is asked about, and only
// those; an empty question is an empty answer.
func TestRecordedCheckoutsNamesOnlyRecordedOnes(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := store.New(pool)
	ctx := t.Context()
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)
	recorded := rec.CheckoutID
	unknown := testenv.RandomID("c-")
	got, err := s.RecordedCheckouts(ctx, []string{unknown, recorded, recorded})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[recorded] {
		t.Errorf("RecordedCheckouts(%s, %s) = %v, want only %s", unknown, recorded, got, recorded)
	}
	if got, err := s.RecordedCheckouts(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("RecordedCheckouts(nil) = %v, %v; want nothing", got, err)
	}
}

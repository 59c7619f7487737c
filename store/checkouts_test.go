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

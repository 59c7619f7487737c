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

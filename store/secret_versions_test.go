package store_test

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/store"
)

// A checkout's secret is on version 0 until support revokes it; each revocation moves that
// checkout, and only it, to the next version.
func TestRevokingASecretMovesOnlyItsCheckoutToTheNextVersion(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := store.New(pool)
	ctx := t.Context()
	revoked, other := testenv.RandomID("c-"), testenv.RandomID("c-")
	for i, want := range []int64{1, 2} {
		got, err := s.RevokeSecret(ctx, revoked)
		if err != nil || got != want {
			t.Fatalf("revocation %d = %d, %v; want %d", i+1, got, err, want)
		}
		if v, err := s.SecretVersion(ctx, revoked); err != nil || v != want {
			t.Errorf("after revocation %d: version = %d, %v; want %d", i+1, v, err, want)
		}
	}
	if v, err := s.SecretVersion(ctx, other); err != nil || v != 0 {
		t.Errorf("another checkout's version = %d, %v; want 0", v, err)
	}
}

package store_test

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/store"
)

// A checkout's secret is on version 0 until support revokes it; each revocation moves that
// checkout, and only it, to the next version. The API's read of records (RecordedCheckouts)
// answers the versions, for carts Postgres has not recorded too (a cart in line).
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
		r, err := s.RecordedCheckouts(ctx, []string{revoked, other}, nil, nil)
		if err != nil || r.SecretVersions[revoked] != want || r.SecretVersions[other] != 0 {
			t.Errorf("after revocation %d: versions = %v, %v; want %d, and 0 for the other checkout", i+1, r.SecretVersions, err, want)
		}
	}
}

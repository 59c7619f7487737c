package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// TestIdempotencyKeyBelongsToOneBodyAcrossCarts: the contract binds an Idempotency-Key to one
// request body for any cart. Reused for another cart it is 422 idempotency_key_reused and
// no saga starts for that cart; the same key with the same body stays a retry (200).
func TestIdempotencyKeyBelongsToOneBodyAcrossCarts(t *testing.T) {
	l := newLive(t, nil, nil)
	l.startWorker(t)
	phone := l.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	cartA, cartB := testenv.RandomID("a-"), testenv.RandomID("b-")
	key := map[string]string{"Idempotency-Key": testenv.RandomID("key-")}

	if code, body := l.post(t, cart(cartA, "u-1", phone, 1), key); code != http.StatusCreated {
		t.Fatalf("first POST of cart %s = %d %s, want 201", cartA, code, body)
	}
	code, body := l.post(t, cart(cartB, "u-1", phone, 1), key)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"idempotency_key_reused"`) {
		t.Errorf("cart %s with cart %s's key = %d %s, want 422 idempotency_key_reused", cartB, cartA, code, body)
	}
	if l.sagaExists(t, cartB) {
		t.Errorf("a saga was started for cart %s, whose key belongs to cart %s", cartB, cartA)
	}
	if code, body := l.post(t, cart(cartA, "u-1", phone, 1), key); code != http.StatusOK {
		t.Errorf("retried POST of cart %s with its key = %d %s, want 200", cartA, code, body)
	}
	// Another body for the same cart and key is refused too (the saga's own check did this
	// before; the index must not loosen it).
	if code, body := l.post(t, cart(cartA, "u-1", phone, 2), key); code != http.StatusUnprocessableEntity {
		t.Errorf("cart %s with its key and another body = %d %s, want 422", cartA, code, body)
	}
	l.assertHeld(t, phone, 1)
}

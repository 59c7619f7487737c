package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/store"
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

// Idempotency-Keys belong to their caller: a shop backend (client token) or a buyer (identity
// token). One caller taking a key equal to another's cart id, or to any key another uses,
// blocks nothing of the other's; within one caller a key still binds one body, for any cart.
func TestIdempotencyKeysOfOneCallerNeverBlockAnothers(t *testing.T) {
	for _, mode := range []string{"server to server", "browser direct"} {
		t.Run(mode, func(t *testing.T) {
			var a, b map[string]string
			l := newLive(t, nil, func(cfg *api.Config, d *api.Deps) {
				if mode == "browser direct" {
					cfg.IdentityTokens = hmacIdentity(t)
					return
				}
				cfg.ClientTokens = map[string]string{"token-of-shop-a-0001": "shop-a", "token-of-shop-b-0002": "shop-b"}
				d.Owners = d.Records.(*store.Store)
			})
			customerA, customerB := testenv.RandomID("u-a-"), testenv.RandomID("u-b-")
			if mode == "browser direct" {
				a = map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customerA)}
				b = map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customerB)}
			} else {
				a, b = bearer("token-of-shop-a-0001"), bearer("token-of-shop-b-0002")
			}
			with := func(h map[string]string, k, v string) map[string]string {
				out := map[string]string{k: v}
				for hk, hv := range h {
					out[hk] = hv
				}
				return out
			}
			l.startWorker(t)
			phone := l.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
			cartA, cartB := testenv.RandomID("a-"), testenv.RandomID("b-")

			// A takes B's future cart id as its key.
			if code, body := l.post(t, cart(cartA, customerA, phone, 1), with(a, "Idempotency-Key", cartB)); code != http.StatusCreated {
				t.Fatalf("A's cart %s under key %s = %d %s, want 201", cartA, cartB, code, body)
			}
			// B's cart, with its default key (the cart id), and then under the key A used.
			if code, body := l.post(t, cart(cartB, customerB, phone, 1), b); code != http.StatusCreated {
				t.Errorf("B's cart %s with its default key = %d %s, want 201: A's key must not block it", cartB, code, body)
			}
			cartB2 := testenv.RandomID("b2-")
			if code, body := l.post(t, cart(cartB2, customerB, phone, 1), with(b, "Idempotency-Key", cartB)); code != http.StatusUnprocessableEntity {
				t.Errorf("B's second cart under B's own key %s = %d %s, want 422: B used it for another body", cartB, code, body)
			}
			// Within A the contract holds: A's key with another cart is 422.
			if code, body := l.post(t, cart(testenv.RandomID("a2-"), customerA, phone, 1), with(a, "Idempotency-Key", cartB)); code != http.StatusUnprocessableEntity || !strings.Contains(body, `"idempotency_key_reused"`) {
				t.Errorf("A's second cart under A's key = %d %s, want 422 idempotency_key_reused", code, body)
			}
			l.assertHeld(t, phone, 2)
		})
	}
}

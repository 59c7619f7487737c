package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// CheckoutSecretHeader carries a buyer's checkout secret on GET and cancel of its checkout.
const CheckoutSecretHeader = "Checkout-Secret"

// DevCheckoutSecretKey signs checkout secrets when Config.CheckoutSecretKeys is empty: the
// local stack and tests. It is public, so `checkout api` refuses it.
const DevCheckoutSecretKey = "checkout-saga-local-dev-checkout-secret-key"

// DefaultCheckoutSecretGrace is how long after its checkout ended a checkout secret still
// opens it (Config.CheckoutSecretGrace): a buyer back on the order page within a month sees
// how it ended. Past that, a secret that leaked (a support ticket, a screenshot, a backend's
// log) opens nothing, and support answers with the admin token.
const DefaultCheckoutSecretGrace = 30 * 24 * time.Hour

// MinCheckoutSecretKeyLen is the shortest signing key `checkout api` takes: 32 bytes, as
// much as HMAC-SHA256 puts out.
const MinCheckoutSecretKeyLen = 32

// CheckoutSecret is the secret of cartID under key: base64url (unpadded) of
// HMAC-SHA256(key, "checkout-secret\x00" + cartID), 43 characters of 256 bits. It is derived,
// never stored: every replica with the key answers and checks the same secret, and a retried
// POST gets the one the first got. The prefix keeps these MACs apart from any other use of
// the key.
func CheckoutSecret(key, cartID string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("checkout-secret\x00" + cartID))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// checkoutSecrets signs with the first key and accepts any: during a rotation the new key
// goes first and the old one stays listed until the carts it signed are over.
type checkoutSecrets []string

func (keys checkoutSecrets) sign(cartID string) string { return CheckoutSecret(keys[0], cartID) }

// verify reports whether secret is cartID's under any key, comparing each in constant time
// and every key whatever the others gave, so timing tells nothing of which one nearly matched.
func (keys checkoutSecrets) verify(cartID, secret string) bool {
	ok := false
	for _, k := range keys {
		if hmac.Equal([]byte(CheckoutSecret(k, cartID)), []byte(secret)) {
			ok = true
		}
	}
	return ok
}

// bySecretKey marks a request's context when the checkout secret alone opened the checkout
// (buyerCart): not a client's own cart, not support's admin token.
type bySecretKey struct{}

func openedBySecret(ctx context.Context) context.Context {
	return context.WithValue(ctx, bySecretKey{}, true)
}

// secretLapsed reports whether the checkout secret that opened rec no longer does: rec ended
// more than Config.CheckoutSecretGrace ago. The end is the one Postgres records, so every
// place that answers an ended checkout asks it here (recordedView, finishedView, getCheckout
// after a wait); an open checkout costs no lookup. Only that checkout's secret lapses: no
// key changes, so no other buyer is logged out.
func (s *Server) secretLapsed(ctx context.Context, rec shop.CheckoutRecord) bool {
	bySecret, _ := ctx.Value(bySecretKey{}).(bool)
	return bySecret && rec.EndedAt != nil && time.Since(*rec.EndedAt) > s.cfg.CheckoutSecretGrace
}

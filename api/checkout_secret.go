package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

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
// the key. It is the secret of version 0, every checkout's until support revokes it
// (CheckoutSecretAt).
func CheckoutSecret(key, cartID string) string { return CheckoutSecretAt(key, cartID, 0) }

// CheckoutSecretAt is cartID's secret at a secret version: support's revocation moves a
// checkout to the next version (CheckoutRecords.RevokeSecret), and the version is folded into
// the MAC, "checkout-secret\x00" + cartID + "\x00" + version, so a revoked secret matches
// nothing and no other checkout's changes. Version 0 adds nothing: the secrets handed out
// before versions existed still open their checkouts. A cart id has no NUL, so no two
// (cart, version) pairs sign the same bytes.
func CheckoutSecretAt(key, cartID string, version int64) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("checkout-secret\x00" + cartID))
	if version > 0 {
		mac.Write([]byte("\x00" + strconv.FormatInt(version, 10)))
	}
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// checkoutSecrets signs with the first key and accepts any: during a rotation the new key
// goes first and the old one stays listed until the carts it signed are over.
type checkoutSecrets []string

func (keys checkoutSecrets) sign(cartID string, version int64) string {
	return CheckoutSecretAt(keys[0], cartID, version)
}

// verify reports whether secret is cartID's at version under any key, comparing each in
// constant time and every key whatever the others gave, so timing tells nothing of which one
// nearly matched.
func (keys checkoutSecrets) verify(cartID string, version int64, secret string) bool {
	ok := false
	for _, k := range keys {
		if hmac.Equal([]byte(CheckoutSecretAt(k, cartID, version)), []byte(secret)) {
			ok = true
		}
	}
	return ok
}

// ctxRecordRead holds the read of the cart's record that checked the request's secret (a
// *recordedAsk): a GET that looked the room up before it needs no second read (getCheckout).
const ctxRecordRead = "record_read"

// readRecord is Postgres's word on cartID: whether it recorded the cart, by whose request,
// whether it ended, and its secret's version; nil without Records (tests with no Postgres,
// where no secret is revoked: version 0). It is read with the records of the moment's other
// requests (recordedCheck): a crowd of long polls, a buyer's tabs, the waiting room's 202s
// would otherwise queue for the pool's few connections. Every request that carries a
// Checkout-Secret reads it, and every answer that hands one out has it from the door's read.
// Postgres unreachable is 503, since a secret that may be revoked must not open its checkout.
func (s *Server) readRecord(ctx context.Context, cartID string) (*recordedAsk, error) {
	if s.recorded == nil {
		return nil, nil
	}
	a, err := s.recorded.recordedAndStanding(ctx, cartID, "", nil)
	if err != nil {
		return nil, unavailable("postgres", err)
	}
	return a, nil
}

// openedBySecretOrToken reports whether the request's Checkout-Secret opens cartID, or, in
// browser mode, whether its identity token names the checkout's customer (as Postgres
// recorded it: a cart still waiting in line, not yet recorded, opens with its secret only).
// Anything else opens nothing, and the caller answers as for a cart that does not exist: a
// revoked secret, an identity token that does not verify or names another customer.
func (s *Server) openedBySecretOrToken(c echo.Context, cartID string) (bool, error) {
	ctx := c.Request().Context()
	if secret := c.Request().Header.Get(CheckoutSecretHeader); secret != "" {
		read, err := s.readRecord(ctx, cartID)
		if err != nil {
			return false, err
		}
		c.Set(ctxRecordRead, read)
		if s.secrets.verify(cartID, read.version(), secret) {
			c.SetRequest(c.Request().WithContext(openedBySecret(ctx)))
			return true, nil
		}
	}
	customer := s.tokenCustomer(c)
	if customer == "" || s.Records == nil {
		return false, nil
	}
	rec, err := s.Records.Checkout(ctx, cartID)
	switch {
	case errors.Is(err, shop.ErrNotFound):
		return false, nil
	case err != nil:
		return false, unavailable("postgres", err)
	}
	if rec.CustomerID != customer {
		return false, nil
	}
	c.Set(ctxCustomer, customer) // the request log names the buyer
	return true, nil
}

// tokenCustomer is the customer a valid identity token of the request names, in browser
// mode; "" for none, or a token that does not verify.
func (s *Server) tokenCustomer(c echo.Context) string {
	if s.cfg.IdentityTokens == nil {
		return ""
	}
	scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return ""
	}
	customer, err := s.cfg.IdentityTokens.Customer(token, time.Now())
	if err != nil {
		return ""
	}
	return customer
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

package api_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// reserved makes update-with-start answer cart's reservation: the saga the request started
// (created) or, for a retry, the one the first request started with firstKey.
func (m *mockedTemporal) reserved(t *testing.T, cart string, created bool, firstKey string) {
	handle := mocks.NewWorkflowUpdateHandle(t)
	in := m.updateWithStart(handle, nil)
	handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		key := firstKey
		if created {
			key = in.IdempotencyKey
		}
		*args.Get(1).(*workflows.ReservationResult) = workflows.ReservationResult{View: viewOf(cart, shop.StatusAwaitingPayment),
			Created: created, RequestHash: in.RequestHash, IdempotencyKey: key}
	}).Return(nil).Once()
}

// postCart sends a one-line cart of sku with the Idempotency-Key (none when "").
func (m *mockedTemporal) postCart(t *testing.T, cart, sku, key string) *httptest.ResponseRecorder {
	t.Helper()
	header := map[string]string{}
	if key != "" {
		header["Idempotency-Key"] = key
	}
	return m.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(`{"cart_id":"` + cart +
		`","customer_id":"u-1","items":[{"sku":"` + sku + `","quantity":1}]}`), header: header})
}

// secretOf is the checkout_secret of a POST's answer ("" when it has none).
func secretOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var v struct {
		Secret string `json:"checkout_secret"`
	}
	decodeJSON(t, rec, &v)
	return v.Secret
}

func withSecret(secret string) map[string]string { return map[string]string{"Checkout-Secret": secret} }

// wrongSecret is secret with its first character changed: a secret of the same shape that
// opens nothing. (Writing "A" over it left one secret in 64, those that begin with "A", as it
// was.)
func wrongSecret(secret string) string {
	first := "A"
	if strings.HasPrefix(secret, first) {
		first = "B"
	}
	return first + secret[1:]
}

// The buyer who created a checkout gets its secret in the 201, and only with it can read or
// cancel the checkout. Without it (no header, a wrong one, another cart's) the answer is the
// 404 of a cart that does not exist, and the saga is never asked: the mock fails the test on
// any Temporal call it was not told to expect.
func TestOnlyTheCheckoutsSecretReadsOrCancelsIt(t *testing.T) {
	m := newMockedTemporal(t)
	cart, other := testenv.RandomID("cart-"), testenv.RandomID("cart-")
	sku := m.stockSKU(t, "SECRET-", 10, 500, 5, "usd")
	m.reserved(t, cart, true, "")
	secret := secretOf(t, m.postCart(t, cart, sku, ""))
	if raw, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(raw) < 16 {
		t.Fatalf("checkout_secret %q: %d bytes (%v), want at least 128 bits of base64url", secret, len(raw), err)
	}
	m.reserved(t, other, true, "")
	otherSecret := secretOf(t, m.postCart(t, other, sku, ""))
	if otherSecret == secret || otherSecret == "" {
		t.Fatalf("carts %s and %s have the secrets %q and %q, want two different ones", cart, other, secret, otherSecret)
	}

	m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
	get := m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: withSecret(secret)})
	if v := checkoutView(t, get, http.StatusOK); v.CheckoutID != cart {
		t.Errorf("GET with the secret = %+v, want the view of %s", v, cart)
	}
	if s := secretOf(t, get); s != "" {
		t.Errorf("GET answered the secret %q: it goes to the creator only", s)
	}

	// What a cart that does not exist answers: not_found, "no checkout <id>".
	m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, serviceerror.NewNotFound("gone")).Once()
	ghost := testenv.RandomID("cart-")
	unknown := problemOf(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + ghost,
		header: withSecret(api.CheckoutSecret(api.DevCheckoutSecretKey, ghost))}),
		http.StatusNotFound, "not_found")
	for _, tt := range []struct{ name, secret string }{
		{"no secret", ""},
		{"a wrong secret", wrongSecret(secret)},
		{"another cart's secret", otherSecret},
	} {
		t.Run(tt.name, func(t *testing.T) {
			header := map[string]string{}
			if tt.secret != "" {
				header = withSecret(tt.secret)
			}
			for _, r := range []request{
				{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: header},
				{method: http.MethodGet, path: "/v1/checkouts/" + cart + "?wait=5", header: header},
				{method: http.MethodPost, path: "/v1/checkouts/" + cart + "/cancel", header: header},
			} {
				p := problemOf(t, m.do(t, r), http.StatusNotFound, "not_found")
				if want := strings.Replace(unknown.Detail, ghost, cart, 1); p.Detail != want {
					t.Errorf("%s %s: detail %q, want %q, as for a cart that does not exist", r.method, r.path, p.Detail, want)
				}
			}
		})
	}
}

// A retried POST (same body, same Idempotency-Key) answers the same secret: it is derived
// from the cart id, not stored, so every replica agrees. The same body under another key is
// someone who knows the cart, not its creator: the view, without the secret.
func TestARetriedPostAnswersTheSameSecret(t *testing.T) {
	m := newMockedTemporal(t)
	cart := testenv.RandomID("cart-")
	sku := m.stockSKU(t, "SECRET-", 10, 500, 5, "usd")
	key := testenv.RandomID("key-")
	m.reserved(t, cart, true, "")
	first := m.postCart(t, cart, sku, key)
	if first.Code != http.StatusCreated {
		t.Fatalf("first POST = %d %s, want 201", first.Code, first.Body)
	}
	m.reserved(t, cart, false, key)
	retry := m.postCart(t, cart, sku, key)
	if retry.Code != http.StatusOK || secretOf(t, retry) != secretOf(t, first) || secretOf(t, first) == "" {
		t.Errorf("retry = %d with secret %q, want 200 with the first answer's %q", retry.Code, secretOf(t, retry), secretOf(t, first))
	}
	m.reserved(t, cart, false, key)
	if rec := m.postCart(t, cart, sku, testenv.RandomID("key-")); rec.Code != http.StatusOK || secretOf(t, rec) != "" {
		t.Errorf("the same body under another key = %d %s, want 200 without checkout_secret", rec.Code, rec.Body)
	}
}

// Keys rotate: the first key signs new secrets and every listed key still opens the carts it
// signed for, so a buyer holding a secret from before the rotation is not locked out. A key
// taken off the list opens nothing.
func TestCheckoutSecretKeysRotate(t *testing.T) {
	const newKey, oldKey, retired = "the-new-checkout-secret-key-0123456789", "the-old-checkout-secret-key-0123456789", "a-retired-checkout-secret-key-012345678"
	tc := mocks.NewClient(t)
	m := &mockedTemporal{tc: tc, harness: newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.CheckoutSecretKeys = []string{newKey, oldKey}
		d.Temporal = tc
	})}
	cart := testenv.RandomID("cart-")
	m.reserved(t, cart, true, "")
	if got, want := secretOf(t, m.postCart(t, cart, m.stockSKU(t, "SECRET-", 10, 500, 5, "usd"), "")), api.CheckoutSecret(newKey, cart); got != want {
		t.Errorf("checkout_secret %q, want %q, signed with the first key", got, want)
	}
	m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
	checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: withSecret(api.CheckoutSecret(oldKey, cart))}), http.StatusOK)
	problemOf(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: withSecret(api.CheckoutSecret(retired, cart))}),
		http.StatusNotFound, "not_found")
}

// An authenticated client reads and cancels its own carts without their secrets (the shop's
// backend answers its buyers itself); another client's cart stays 404 even with its secret.
// Support reads any checkout with the admin token, but cancels through its own route.
func TestClientsAndSupportNeedNoCheckoutSecret(t *testing.T) {
	tokens, err := api.ParseClientTokens("shop-a=token-of-shop-a-0001,shop-b=token-of-shop-b-0002")
	if err != nil {
		t.Fatal(err)
	}
	tc := mocks.NewClient(t)
	var records *store.Store
	m := &mockedTemporal{tc: tc, harness: newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.ClientTokens = tokens
		records = d.Records.(*store.Store)
		d.Owners = records
		d.Temporal = tc
	})}
	cart := testenv.RandomID("cart-")
	if _, err := records.ClaimCheckout(t.Context(), cart, "shop-a"); err != nil {
		t.Fatal(err)
	}
	m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
	checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: bearer("token-of-shop-a-0001")}), http.StatusOK)
	header := bearer("token-of-shop-b-0002")
	header["Checkout-Secret"] = api.CheckoutSecret(api.DevCheckoutSecretKey, cart)
	problemOf(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: header}), http.StatusNotFound, "not_found")

	support := newMockedTemporal(t) // CLIENT_TOKENS off
	support.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
	checkoutView(t, support.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: bearer(testAdminToken)}), http.StatusOK)
	problemOf(t, support.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + cart + "/cancel", header: bearer(testAdminToken)}),
		http.StatusNotFound, "not_found")
}

// A checkout secret stops opening its checkout api.DefaultCheckoutSecretGrace after the
// checkout ended, as Postgres records the end, so one that leaked (a ticket, a screenshot, a
// backend's log) does not open it forever; every other checkout's secret keeps working, and
// support still reads it with the admin token. A checkout that ended within the grace, or
// never ended, opens as before. Each way an ended checkout is answered is covered: from
// Postgres alone, from a closed saga's result, and at the end of a GET's wait.
func TestACheckoutSecretLapsesAfterItsCheckoutEnded(t *testing.T) {
	ended := func(t *testing.T, m *mockedTemporal, ago time.Duration) string {
		t.Helper()
		cart := testenv.RandomID("cart-")
		if _, err := store.New(m.pool).RecordEnd(t.Context(), shop.CheckoutRecord{CheckoutID: cart, CustomerID: "u-1",
			Status: string(shop.StatusExpired), Currency: "usd", AmountCents: 500}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.pool.Exec(t.Context(), `UPDATE checkouts SET ended_at = now() - make_interval(secs => $2) WHERE checkout_id = $1`,
			cart, ago.Seconds()); err != nil {
			t.Fatal(err)
		}
		return cart
	}
	gone := func(m *mockedTemporal) {
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, serviceerror.NewNotFound("gone")).Once()
	}
	closed := func(t *testing.T, m *mockedTemporal, cart string) {
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).
			Return(&client.QueryWorkflowWithOptionsResponse{QueryRejected: &querypb.QueryRejected{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}, nil).Once()
		m.finishedWith(t, cart, viewOf(cart, shop.StatusExpired))
	}
	lapsed := api.DefaultCheckoutSecretGrace + time.Hour
	get := func(m *mockedTemporal, path string, header map[string]string) *httptest.ResponseRecorder {
		return m.do(t, request{method: http.MethodGet, path: path, header: header})
	}

	t.Run("answered from postgres", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := ended(t, m, lapsed)
		gone(m)
		problemOf(t, get(m, "/v1/checkouts/"+cart, buyerOf(cart)), http.StatusNotFound, "not_found")
		gone(m)
		checkoutView(t, get(m, "/v1/checkouts/"+cart, bearer(testAdminToken)), http.StatusOK)
	})
	t.Run("answered from the closed saga's result", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := ended(t, m, lapsed)
		closed(t, m, cart)
		problemOf(t, get(m, "/v1/checkouts/"+cart, buyerOf(cart)), http.StatusNotFound, "not_found")
	})
	t.Run("answered at the end of a wait", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := ended(t, m, lapsed)
		m.finishedWith(t, cart, viewOf(cart, shop.StatusExpired)) // the wait's poll: ended
		problemOf(t, get(m, "/v1/checkouts/"+cart+"?wait=1", buyerOf(cart)), http.StatusNotFound, "not_found")
	})
	t.Run("ended within the grace", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := ended(t, m, api.DefaultCheckoutSecretGrace-time.Hour)
		gone(m)
		checkoutView(t, get(m, "/v1/checkouts/"+cart, buyerOf(cart)), http.StatusOK)
		closed(t, m, cart)
		checkoutView(t, get(m, "/v1/checkouts/"+cart, buyerOf(cart)), http.StatusOK)
	})
	t.Run("a shorter grace", func(t *testing.T) {
		tc := mocks.NewClient(t)
		h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
			d.Temporal = tc
			cfg.CheckoutSecretGrace = 7 * 24 * time.Hour
		})
		m := &mockedTemporal{harness: h, tc: tc}
		cart := ended(t, m, 8*24*time.Hour)
		gone(m)
		problemOf(t, get(m, "/v1/checkouts/"+cart, buyerOf(cart)), http.StatusNotFound, "not_found")
	})
}

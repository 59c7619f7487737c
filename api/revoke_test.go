package api_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// Support revokes one checkout's secret (browser mode, a real Temporal dev server and
// worker): from then on that secret opens nothing, with the same 404 as a wrong secret, for
// GET and cancel; another checkout's secret still opens its own; the buyer's identity token
// still reads the checkout (another customer's does not); and the creator's retry of the
// POST gets a fresh secret that opens it.
func TestSupportRevokesOneCheckoutsSecret(t *testing.T) {
	l := newLive(t, nil, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	l.startWorker(t)
	sku := l.stockSKU(t, "REVOKE-", 10, 99900, 2, "usd")
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	as := func(customer string) map[string]string {
		return map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customer)}
	}
	posted := func(who, id string) string {
		t.Helper()
		rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(id, "", sku, 1)), header: as(who)})
		if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
			t.Fatalf("%s's POST of %s: %d %s", who, id, rec.Code, rec.Body.String())
		}
		s := secretOf(t, rec)
		if s == "" {
			t.Fatalf("%s's POST of %s: no checkout_secret in %s", who, id, rec.Body.String())
		}
		return s
	}
	get := func(id string, header map[string]string) *http.Response {
		t.Helper()
		return l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + id, header: header}).Result()
	}
	revoked, kept := testenv.RandomID("c-"), testenv.RandomID("c-")
	old, other := posted(alice, revoked), posted(bob, kept)
	if code := get(revoked, withSecret(old)).StatusCode; code != http.StatusOK {
		t.Fatalf("GET with the secret before the revocation: %d, want 200", code)
	}

	rec := l.do(t, request{method: http.MethodPost, path: "/v1/admin/checkouts/" + revoked + "/revoke-secret", header: bearer(testAdminToken)})
	if rec.Code != http.StatusOK {
		t.Fatalf("revoke: %d %s, want 200", rec.Code, rec.Body.String())
	}

	wrong := problemOf(t, l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + revoked, header: withSecret(wrongSecret(old))}), http.StatusNotFound, "not_found")
	for _, r := range []request{
		{method: http.MethodGet, path: "/v1/checkouts/" + revoked, header: withSecret(old)},
		{method: http.MethodGet, path: "/v1/checkouts/" + revoked + "?wait=1", header: withSecret(old)},
		{method: http.MethodPost, path: "/v1/checkouts/" + revoked + "/cancel", header: withSecret(old)},
		{method: http.MethodGet, path: "/v1/checkouts/" + revoked, header: as(bob)},
	} {
		if p := problemOf(t, l.do(t, r), http.StatusNotFound, "not_found"); p.Detail != wrong.Detail {
			t.Errorf("%s %s with the revoked secret: detail %q, want %q as for a wrong secret", r.method, r.path, p.Detail, wrong.Detail)
		}
	}
	if code := get(kept, withSecret(other)).StatusCode; code != http.StatusOK {
		t.Errorf("another checkout's GET with its own secret after the revocation: %d, want 200", code)
	}
	if v := checkoutView(t, l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + revoked, header: as(alice)}), http.StatusOK); v.CheckoutID != revoked {
		t.Errorf("alice's GET with her identity token: %+v, want her checkout", v)
	}

	fresh := posted(alice, revoked)
	if fresh == old {
		t.Fatalf("alice's retry after the revocation got the revoked secret again")
	}
	if code := get(revoked, withSecret(fresh)).StatusCode; code != http.StatusOK {
		t.Errorf("GET with the retry's fresh secret: %d, want 200", code)
	}
	if len(fresh) != len(old) {
		t.Errorf("fresh secret %q: want the same shape as %q", fresh, old)
	}
}

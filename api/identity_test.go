package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// The shop's login, as the identity tests know it.
const (
	loginIssuer   = "https://login.shop.test"
	loginAudience = "checkout-api"
	loginSecret   = "the-shop-logins-hmac-secret-0123456789"
)

// hmacIdentity is the verifier of the login's HMAC-signed tokens.
func hmacIdentity(t *testing.T) *api.IdentityVerifier {
	t.Helper()
	v, err := api.NewIdentityVerifier(api.IdentitySettings{HMACSecret: []byte(loginSecret), Issuer: loginIssuer, Audience: loginAudience})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// loginClaims are the claims of a fresh token for customer, valid for 10 minutes.
func loginClaims(customer string) jwt.Claims {
	now := time.Now()
	return jwt.Claims{Issuer: loginIssuer, Audience: jwt.Audience{loginAudience}, Subject: customer,
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(10 * time.Minute))}
}

// signToken signs claims with key under alg (kid names the key in a key set, "" for none).
func signToken(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims any) string {
	t.Helper()
	return signTyped(t, "JWT", alg, key, kid, claims)
}

// signTyped is signToken with the header's typ ("" for none).
func signTyped(t *testing.T, typ string, alg jose.SignatureAlgorithm, key any, kid string, claims any) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// loginToken is a valid token of the login for customer.
func loginToken(t *testing.T, customer string) string {
	return signToken(t, jose.HS256, []byte(loginSecret), "", loginClaims(customer))
}

// unsignedToken is a token with alg "none": claims anyone can write.
func unsignedToken(claims jwt.Claims) string {
	enc := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "none", "typ": "JWT"})
	payload, _ := json.Marshal(claims)
	return enc(header) + "." + enc(payload) + "."
}

// postAs sends cart from addr with the Authorization header auth ("" for none).
func (h *harness) postAs(t *testing.T, addr, auth, cart string) *httptest.ResponseRecorder {
	t.Helper()
	header := map[string]string{}
	if auth != "" {
		header[echo.HeaderAuthorization] = auth
	}
	return h.serveFrom(addr+":40000", request{method: http.MethodPost, path: "/v1/checkouts", body: strings.NewReader(cart), header: header})
}

// Browser direct: a token the login did not sign, or signed for someone else, or no longer
// valid, is 401 before anything else; a valid one reaches the catalog (here: 422 for an
// unknown SKU). Every answer is checked against the OpenAPI description.
func TestIdentityTokensAreVerified(t *testing.T) {
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	customer := testenv.RandomID("u-")
	claims := func(change func(*jwt.Claims)) jwt.Claims {
		c := loginClaims(customer)
		change(&c)
		return c
	}
	ago := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(time.Now().Add(-d)) }
	hs256 := func(c jwt.Claims) string { return signToken(t, jose.HS256, []byte(loginSecret), "", c) }
	for _, tc := range []struct {
		name, auth string
		ok         bool
	}{
		{"a valid token", "Bearer " + loginToken(t, customer), true},
		{"expired within the leeway", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Expiry = ago(10 * time.Second) })), true},
		{"a lifetime of exactly an hour", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.IssuedAt, c.Expiry = ago(time.Minute), ago(time.Minute-time.Hour) })), true},
		{"the scheme in lower case", "bearer " + loginToken(t, customer), true},
		{"no token", "", false},
		{"Basic credentials", "Basic dXNlcjpwYXNz", false},
		{"not a JWT", "Bearer not-a-token", false},
		{"signed with another secret", "Bearer " + signToken(t, jose.HS256, []byte("another-secret-of-32-bytes-at-least"), "", loginClaims(customer)), false},
		{"alg none", "Bearer " + unsignedToken(loginClaims(customer)), false},
		{"an algorithm not allowed (HS512)", "Bearer " + signToken(t, jose.HS512, []byte(loginSecret+loginSecret), "", loginClaims(customer)), false},
		{"expired", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Expiry = ago(time.Minute) })), false},
		{"no expiry", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Expiry = nil })), false},
		{"no issue time (iat)", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.IssuedAt = nil })), false},
		{"exp 9999999999 and no iat", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.IssuedAt, c.Expiry = nil, jwt.NewNumericDate(time.Unix(9999999999, 0)) })), false},
		{"issued 10 hours ago", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.IssuedAt = ago(10 * time.Hour) })), false},
		{"a lifetime (exp - iat) above an hour", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Expiry = ago(-2 * time.Hour) })), false},
		{"not valid yet", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.NotBefore = ago(-5 * time.Minute) })), false},
		{"another audience", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Audience = jwt.Audience{"another-service"} })), false},
		{"no audience", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Audience = nil })), false},
		{"another issuer", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Issuer = "https://login.evil.test" })), false},
		{"no subject", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Subject = "" })), false},
		{"a subject that is no customer id", "Bearer " + hs256(claims(func(c *jwt.Claims) { c.Subject = "buyer@example.com" })), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := map[string]string{}
			if tc.auth != "" {
				header[echo.HeaderAuthorization] = tc.auth
			}
			rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
				body: body(cart(testenv.RandomID("c-"), customer, "NOPE-SKU", 1)), header: header})
			if tc.ok {
				problemOf(t, rec, http.StatusUnprocessableEntity, "unknown_sku")
				return
			}
			p := problemOf(t, rec, http.StatusUnauthorized, "unauthorized")
			challenge := rec.Header().Get(echo.HeaderWWWAuthenticate)
			if !strings.HasPrefix(challenge, "Bearer ") {
				t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", challenge)
			}
			if strings.HasPrefix(tc.auth, "Bearer ") && !strings.Contains(challenge, `error="invalid_token"`) {
				t.Errorf("WWW-Authenticate = %q, want error=\"invalid_token\"", challenge)
			}
			t.Logf("%s", p.Detail)
		})
	}
}

// A login that signs with public-key algorithms publishes its keys as a JSON Web Key Set: a
// token must name one of them by kid and verify with it, under an allowed algorithm. An HMAC
// token made with a public key as its secret (the classic algorithm confusion) never passes.
func TestIdentityTokensVerifyWithAKeySet(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &ecKey.PublicKey, KeyID: "ec-1", Algorithm: string(jose.ES256), Use: "sig"},
		{Key: &rsaKey.PublicKey, KeyID: "rsa-1", Algorithm: string(jose.RS256), Use: "sig"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := api.NewIdentityVerifier(api.IdentitySettings{JWKS: set, Issuer: loginIssuer, Audience: loginAudience})
	if err != nil {
		t.Fatal(err)
	}
	publicDER, _ := json.Marshal(jose.JSONWebKey{Key: &rsaKey.PublicKey})
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"ES256 with its kid", signToken(t, jose.ES256, ecKey, "ec-1", loginClaims("u-1")), true},
		{"RS256 with its kid", signToken(t, jose.RS256, rsaKey, "rsa-1", loginClaims("u-1")), true},
		{"no kid", signToken(t, jose.ES256, ecKey, "", loginClaims("u-1")), false},
		{"an unknown kid", signToken(t, jose.ES256, ecKey, "ec-2", loginClaims("u-1")), false},
		{"another key under a known kid", signToken(t, jose.RS256, otherRSA, "rsa-1", loginClaims("u-1")), false},
		{"an algorithm not allowed (PS256)", signToken(t, jose.PS256, rsaKey, "rsa-1", loginClaims("u-1")), false},
		{"HS256 with the public key as its secret", signToken(t, jose.HS256, publicDER, "rsa-1", loginClaims("u-1")), false},
		{"alg none", unsignedToken(loginClaims("u-1")), false},
	} {
		customer, err := v.Customer(tc.token, time.Now())
		switch {
		case tc.ok && (err != nil || customer != "u-1"):
			t.Errorf("%s: %q, %v; want customer u-1", tc.name, customer, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: accepted as %q", tc.name, customer)
		}
	}
	// A key set must hold public signing keys only, each with its kid.
	private, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: ecKey, KeyID: "ec-1"}}})
	symmetric, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: []byte(loginSecret), KeyID: "s-1"}}})
	noKid, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &ecKey.PublicKey}}})
	// Two keys under one kid: go-jose would try only the first, so the second never verifies.
	oneKidTwice, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &ecKey.PublicKey, KeyID: "k-1"}, {Key: &rsaKey.PublicKey, KeyID: "k-1"}}})
	for name, raw := range map[string][]byte{"a private key": private, "a symmetric key": symmetric, "a key without kid": noKid,
		"one kid twice": oneKidTwice, "no keys": []byte(`{"keys":[]}`), "not JSON": []byte("-----BEGIN PUBLIC KEY-----")} {
		if _, err := api.NewIdentityVerifier(api.IdentitySettings{JWKS: raw, Issuer: loginIssuer, Audience: loginAudience}); err == nil {
			t.Errorf("a key set with %s was accepted", name)
		}
	}
	for name, s := range map[string]api.IdentitySettings{
		"none as an algorithm":        {HMACSecret: []byte(loginSecret), Algorithms: []string{"none"}, Issuer: loginIssuer, Audience: loginAudience},
		"RS256 with an HMAC secret":   {HMACSecret: []byte(loginSecret), Algorithms: []string{"RS256"}, Issuer: loginIssuer, Audience: loginAudience},
		"HS256 with a key set":        {JWKS: set, Algorithms: []string{"HS256"}, Issuer: loginIssuer, Audience: loginAudience},
		"a short HMAC secret":         {HMACSecret: []byte("short"), Issuer: loginIssuer, Audience: loginAudience},
		"no issuer":                   {HMACSecret: []byte(loginSecret), Audience: loginAudience},
		"no audience":                 {HMACSecret: []byte(loginSecret), Issuer: loginIssuer},
		"neither a secret nor a set":  {Issuer: loginIssuer, Audience: loginAudience},
		"both a secret and a key set": {HMACSecret: []byte(loginSecret), JWKS: set, Issuer: loginIssuer, Audience: loginAudience},
	} {
		if _, err := api.NewIdentityVerifier(s); err == nil {
			t.Errorf("settings with %s were accepted", name)
		}
	}
}

// A script cannot invent customers in browser-direct mode: 50 carts naming 50 made-up
// customer ids are refused, without a token (401) and with the script's own valid token
// (403 customer_mismatch, naming customer_id). Nothing is held, no key is claimed.
func TestBrowserModeCustomersCannotBeInvented(t *testing.T) {
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	sku := h.stockSKU(t, "DROP-", 100, 99900, 2, "usd")
	run := testenv.RandomID("")
	mallory := loginToken(t, "mallory-"+run)
	answers := map[string]int{}
	for i := range 50 {
		auth := ""
		if i%2 == 1 {
			auth = "Bearer " + mallory
		}
		rec := h.postAs(t, "198.51.100.9", auth, cart(fmt.Sprintf("c-%s-%d", run, i), fmt.Sprintf("bot-%s-%d", run, i), sku, 2))
		var p api.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		answers[strconv.Itoa(rec.Code)+" "+p.Code]++
		if rec.Code == http.StatusForbidden {
			assertNames(t, p, "customer_id")
		}
	}
	if answers["401 unauthorized"] != 25 || answers["403 customer_mismatch"] != 25 {
		t.Errorf("50 carts of invented customers: %v; want 25 x 401 unauthorized (no token) and 25 x 403 customer_mismatch (another's token)", answers)
	}
	h.assertUntouched(t, sku, 100)
	var keys int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys`).Scan(&keys); err != nil || keys != 0 {
		t.Errorf("idempotency keys claimed: %d (%v), want 0", keys, err)
	}
	// The token's own customer, named or left out, is the checkout's: it gets past identity
	// (to the catalog's 422 for a SKU that does not exist).
	for _, customer := range []string{"mallory-" + run, ""} {
		rec := h.postAs(t, "198.51.100.9", "Bearer "+mallory, cart("c-own-"+run, customer, "NOPE-"+run, 1))
		problemOf(t, rec, http.StatusUnprocessableEntity, "unknown_sku")
	}
}

// The per-customer rate limit counts the token's subject: one customer is one budget, whatever
// customer_id its carts leave out, and from however many addresses.
func TestPerCustomerLimitCountsTheTokensSubject(t *testing.T) {
	limits := api.RateLimits{Limiter: lua.NewRateLimiter(testenv.Redis(t)), PerCustomer: shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}}
	h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.IdentityTokens = hmacIdentity(t)
		d.RateLimits = &limits
	})
	run := testenv.RandomID("")
	token := "Bearer " + loginToken(t, "u-"+run)
	answers := map[int]int{}
	for i := range 20 {
		customer := "" // left out: the token's
		if i%2 == 0 {
			customer = "u-" + run
		}
		rec := h.postAs(t, fmt.Sprintf("192.0.2.%d", i+1), token, cart(fmt.Sprintf("c-%s-%d", run, i), customer, "NOPE-"+run, 1))
		answers[rec.Code]++
	}
	if answers[http.StatusUnprocessableEntity] != 3 || answers[http.StatusTooManyRequests] != 17 {
		t.Errorf("20 checkouts of one token's customer from 20 addresses: %v; want 3 reaching the catalog (422) and 17 x 429", answers)
	}
}

// max_per_customer counts the token's subject too: the saga is started for that customer,
// whether the body names it or leaves it out, so a second cart of the same buyer over the
// limit is 409 customer_limit; another buyer is not affected.
func TestMaxPerCustomerCountsTheTokensSubject(t *testing.T) {
	l := newLive(t, nil, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	l.startWorker(t)
	sku := l.sku(t, "LIMIT-")
	if _, err := l.inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 99900, Currency: "usd", MaxPerOrder: 2, MaxPerCustomer: 2}}); err != nil {
		t.Fatal(err)
	}
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	as := func(customer string) map[string]string {
		return map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customer)}
	}
	code, answer := l.post(t, cart(testenv.RandomID("c-"), "", sku, 2), as(alice))
	if code != http.StatusCreated || !strings.Contains(answer, `"customer_id":"`+alice+`"`) {
		t.Fatalf("alice's first cart, customer_id left out: %d %s; want 201 for %s", code, answer, alice)
	}
	if code, answer := l.post(t, cart(testenv.RandomID("c-"), alice, sku, 1), as(alice)); code != http.StatusConflict || !strings.Contains(answer, `"customer_limit"`) {
		t.Errorf("alice's second cart: %d %s; want 409 customer_limit", code, answer)
	}
	if code, answer := l.post(t, cart(testenv.RandomID("c-"), "", sku, 2), as(bob)); code != http.StatusCreated {
		t.Errorf("bob's cart: %d %s; want 201", code, answer)
	}
	l.assertHeld(t, sku, 4)
}

// Another customer's POST of a cart id gets 409 checkout_exists and nothing of the checkout,
// while its saga runs and after Support terminated it (Temporal then answers nothing, and
// the record in Postgres, with its creator's fingerprint, is what judges). The creator's
// retry still gets the view and the secret.
func TestAnotherCustomersPostOfACheckoutIsRefusedWhileItRunsAndAfterItIsTerminated(t *testing.T) {
	l := newLive(t, nil, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = hmacIdentity(t) })
	l.startWorker(t)
	sku := l.stockSKU(t, "OWNER-", 10, 99900, 2, "usd")
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	as := func(customer string) map[string]string {
		return map[string]string{echo.HeaderAuthorization: "Bearer " + loginToken(t, customer)}
	}
	id := testenv.RandomID("c-")
	code, first := l.post(t, cart(id, "", sku, 1), as(alice))
	if code != http.StatusCreated || !strings.Contains(first, `"checkout_secret"`) {
		t.Fatalf("alice's cart: %d %s; want 201 with a secret", code, first)
	}
	refused := func(when string) {
		t.Helper()
		code, answer := l.post(t, cart(id, "", sku, 1), as(bob))
		if code != http.StatusConflict || !strings.Contains(answer, `"checkout_exists"`) || strings.Contains(answer, alice) || strings.Contains(answer, "checkout_secret") {
			t.Errorf("%s: bob's POST of alice's cart: %d %s; want 409 checkout_exists and nothing of hers", when, code, answer)
		}
	}
	refused("while the saga runs")
	if err := l.tc.TerminateWorkflow(t.Context(), shop.WorkflowID(id), "", "support pressed Terminate"); err != nil {
		t.Fatal(err)
	}
	refused("after the saga was terminated")
	if code, answer := l.post(t, cart(id, "", sku, 1), as(alice)); code == http.StatusConflict || strings.Contains(answer, "checkout_exists") {
		t.Errorf("alice's own retry after the terminate: %d %s; want her checkout's answer, not 409", code, answer)
	}
}

// With IdentitySettings.Type, only the login's access tokens pass: another JWT the login signs
// for this issuer and audience (an ID token, a refresh token) names another typ, or none. The
// "application/" prefix and case do not matter (RFC 7515, 4.1.9).
func TestIdentityTokensOfAnotherTypeAreRefused(t *testing.T) {
	v, err := api.NewIdentityVerifier(api.IdentitySettings{HMACSecret: []byte(loginSecret), Issuer: loginIssuer, Audience: loginAudience, Type: "at+jwt"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = v })
	customer := testenv.RandomID("u-")
	for _, tc := range []struct {
		typ string
		ok  bool
	}{
		{"at+jwt", true},
		{"application/at+jwt", true},
		{"AT+JWT", true},
		{"JWT", false},
		{"id+jwt", false},
		{"", false},
	} {
		t.Run("typ "+tc.typ, func(t *testing.T) {
			token := signTyped(t, tc.typ, jose.HS256, []byte(loginSecret), "", loginClaims(customer))
			rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
				body:   body(cart(testenv.RandomID("c-"), customer, "NOPE-SKU", 1)),
				header: map[string]string{echo.HeaderAuthorization: "Bearer " + token}})
			if tc.ok {
				problemOf(t, rec, http.StatusUnprocessableEntity, "unknown_sku")
				return
			}
			t.Logf("%s", problemOf(t, rec, http.StatusUnauthorized, "unauthorized").Detail)
		})
	}
	if _, err := api.NewIdentityVerifier(api.IdentitySettings{HMACSecret: []byte(loginSecret), Issuer: loginIssuer, Audience: loginAudience, Type: "application/"}); err == nil {
		t.Error("an empty type after application/ was accepted")
	}
}

// A key removed from the key set file stops verifying without a restart: the verifier looks
// at the file's modification time at most every api.JWKSCheckInterval, and reads it again
// when it changed. A file that does not parse keeps the keys it had, and a key added to the
// file verifies after the next look.
func TestARemovedKeyStopsVerifyingOnceTheKeySetFileChanges(t *testing.T) {
	keys := map[string]*ecdsa.PrivateKey{}
	for _, kid := range []string{"old", "new", "next"} {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys[kid] = k
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	start := time.Now()
	changes := 0
	write := func(raw []byte) {
		t.Helper()
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		// A distinct modification time each write, whatever the file system's resolution.
		changes++
		mtime := start.Add(time.Duration(changes) * time.Minute)
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys := func(kids ...string) {
		t.Helper()
		var set jose.JSONWebKeySet
		for _, kid := range kids {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &keys[kid].PublicKey, KeyID: kid, Use: "sig"})
		}
		raw, err := json.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		write(raw)
	}
	writeKeys("old", "new")
	v, err := api.NewIdentityVerifier(api.IdentitySettings{JWKSFile: path, Issuer: loginIssuer, Audience: loginAudience})
	if err != nil {
		t.Fatal(err)
	}
	token := func(kid string) string { return signToken(t, jose.ES256, keys[kid], kid, loginClaims("u-1")) }
	verifies := func(kid string, at time.Time) bool {
		t.Helper()
		_, err := v.Customer(token(kid), at)
		return err == nil
	}
	if !verifies("old", start) || !verifies("new", start) {
		t.Fatal("the keys of the file at start do not verify")
	}

	writeKeys("new") // "old" leaked and is removed
	if !verifies("old", start.Add(api.JWKSCheckInterval/2)) {
		t.Error("the file was read again before api.JWKSCheckInterval passed")
	}
	at := start.Add(api.JWKSCheckInterval)
	if verifies("old", at) {
		t.Error("a key removed from the file still verifies after api.JWKSCheckInterval")
	}
	if !verifies("new", at) {
		t.Error("the key left in the file no longer verifies")
	}
	// Through the API: the removed key's token is 401, the kept key's reaches the catalog.
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.IdentityTokens = v })
	for kid, want := range map[string]int{"old": http.StatusUnauthorized, "new": http.StatusUnprocessableEntity} {
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
			body:   body(cart(testenv.RandomID("c-"), "u-1", "NOPE-SKU", 1)),
			header: map[string]string{echo.HeaderAuthorization: "Bearer " + token(kid)}})
		if rec.Code != want {
			t.Errorf("a token of the key %q after the reload: %d %s, want %d", kid, rec.Code, rec.Body, want)
		}
	}

	write([]byte(`{"keys": [`)) // half written, or broken: the keys stay as they were
	at = at.Add(api.JWKSCheckInterval)
	if !verifies("new", at) || verifies("old", at) {
		t.Error("a key set file that does not parse changed the keys")
	}
	writeKeys("new", "next", "next") // one kid twice is refused on reload too
	at = at.Add(api.JWKSCheckInterval)
	if !verifies("new", at) || verifies("next", at) {
		t.Error("a key set file naming one kid twice was taken")
	}
	writeKeys("new", "next")
	at = at.Add(api.JWKSCheckInterval)
	if !verifies("new", at) || !verifies("next", at) {
		t.Error("a key added to the file does not verify after the reload")
	}
}

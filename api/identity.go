package api

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Who the customer of a checkout is (docs/security.md, "Identity modes"). With client tokens
// (Config.ClientTokens, server to server) the shop's backend is trusted with the body's
// customer_id. With identity tokens (Config.IdentityTokens, browser direct) the buyer's
// browser calls the API itself, and the customer is the subject of a token the shop's login
// signed: the body cannot name another. With neither (the local stack and tests) the body's
// customer_id is taken as sent; `checkout api` refuses to start so.

// IdentityLeeway is how far the clocks of the shop's login and of the API may disagree when a
// token's exp, nbf and iat are judged: small, since a stolen token should not outlive its
// expiry by much, but not zero, since a login's clock a few seconds ahead would otherwise
// refuse its fresh tokens as issued in the future.
const IdentityLeeway = 30 * time.Second

// MinIdentityHMACSecretLen is the shortest HMAC secret taken: 32 bytes, as much as
// HMAC-SHA256 puts out.
const MinIdentityHMACSecretLen = 32

// DefaultIdentityTokenMaxAge is IdentitySettings.MaxAge when unset: an access token of a
// login lives minutes, and an hour covers a buyer's visit without letting a "remember me"
// token of weeks or an app's long-lived token open checkouts.
const DefaultIdentityTokenMaxAge = time.Hour

// JWKSCheckInterval is how often, at most, the verifier looks at IdentitySettings.JWKSFile's
// modification time, on the request path: a key removed from the file stops verifying within
// this, without a restart, at the cost of one stat per interval.
const JWKSCheckInterval = 5 * time.Second

// maxIdentityTokenLen bounds the token parsed: a login's token is well under 2 KiB; a longer
// one is refused before any base64 or JSON work.
const maxIdentityTokenLen = 8 << 10

// IdentitySettings are how identity tokens are verified: with a shared HMAC secret or with the
// public keys of a JSON Web Key Set (exactly one), for one issuer and one audience.
type IdentitySettings struct {
	HMACSecret []byte
	JWKS       []byte // the key set's JSON, fixed
	// JWKSFile is a file holding the key set, read now and again whenever its modification
	// time or size changed (looked at at most every JWKSCheckInterval), so a key removed from
	// it stops verifying without a restart. A file that no longer parses keeps the keys read
	// last, and is logged.
	JWKSFile string
	// Algorithms are the "alg"s a token may use; empty: HS256 with an HMAC secret, RS256 and
	// ES256 with a key set. "none" is never one, and HMAC and public-key algorithms never mix,
	// so a public key cannot be used as an HMAC secret.
	Algorithms []string
	Issuer     string // the token's iss must be this
	Audience   string // and its aud must name this
	// MaxAge bounds a token's life: iat is required, exp - iat may not exceed it and iat may
	// not be older than it. 0 is DefaultIdentityTokenMaxAge.
	MaxAge time.Duration
	// Type, when set, is the typ header the login gives its access tokens and no other JWT
	// (RFC 9068: "at+jwt"), so its ID or refresh tokens for this audience do not pass. Case
	// and an "application/" prefix do not matter (RFC 7515, 4.1.9).
	Type string
}

// IdentitySettingError names the setting NewIdentityVerifier refused ("hmac_secret", "jwks",
// "algorithms", "issuer", "audience", "max_age", "type"), so the binary can name its variable.
type IdentitySettingError struct {
	Setting string
	Err     error
}

func (e *IdentitySettingError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *IdentitySettingError) Unwrap() error { return e.Err }

// IdentityVerifier checks identity tokens and names their customer.
type IdentityVerifier struct {
	key              any // []byte or *jose.JSONWebKeySet; nil with a key set file
	file             *keySetFile
	algs             []jose.SignatureAlgorithm
	issuer, audience string
	maxAge           time.Duration
	typ              string // normalized by mediaType; "" takes any
}

// hmacAlgorithms and publicKeyAlgorithms are the algorithms each kind of key may verify.
var (
	hmacAlgorithms      = []jose.SignatureAlgorithm{jose.HS256, jose.HS384, jose.HS512}
	publicKeyAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
		jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}
)

// NewIdentityVerifier checks the settings and returns their verifier.
func NewIdentityVerifier(s IdentitySettings) (*IdentityVerifier, error) {
	v := &IdentityVerifier{issuer: s.Issuer, audience: s.Audience, maxAge: s.MaxAge, typ: mediaType(s.Type)}
	if err := v.useKey(s); err != nil {
		return nil, err
	}
	if err := v.useAlgorithms(s.Algorithms); err != nil {
		return nil, err
	}
	if s.Issuer == "" {
		return nil, badIdentitySetting("issuer", "is required: a token of another issuer must not pass")
	}
	if s.Audience == "" {
		return nil, badIdentitySetting("audience", "is required: a token the login issued for another service must not pass")
	}
	switch {
	case v.maxAge == 0:
		v.maxAge = DefaultIdentityTokenMaxAge
	case v.maxAge < 0:
		return nil, badIdentitySetting("max_age", "must be positive")
	}
	if s.Type != "" && v.typ == "" {
		return nil, badIdentitySetting("type", "%q names no media type", s.Type)
	}
	return v, nil
}

func badIdentitySetting(setting, format string, args ...any) error {
	return &IdentitySettingError{Setting: setting, Err: fmt.Errorf(format, args...)}
}

// useKey takes the one key the settings name: an HMAC secret, a key set, or a key set file.
func (v *IdentityVerifier) useKey(s IdentitySettings) error {
	switch {
	case len(s.HMACSecret) > 0 && (len(s.JWKS) > 0 || s.JWKSFile != ""):
		return badIdentitySetting("jwks", "set an HMAC secret or a key set, not both")
	case len(s.JWKS) > 0 && s.JWKSFile != "":
		return badIdentitySetting("jwks", "set a key set or a key set file, not both")
	case len(s.HMACSecret) > 0:
		if len(s.HMACSecret) < MinIdentityHMACSecretLen {
			return badIdentitySetting("hmac_secret", "must be at least %d bytes", MinIdentityHMACSecretLen)
		}
		v.key = s.HMACSecret
	case len(s.JWKS) > 0:
		set, err := parsePublicKeySet(s.JWKS)
		if err != nil {
			return badIdentitySetting("jwks", "%w", err)
		}
		v.key = set
	case s.JWKSFile != "":
		f, err := openKeySetFile(s.JWKSFile)
		if err != nil {
			return badIdentitySetting("jwks", "%w", err)
		}
		v.file = f
	default:
		return badIdentitySetting("hmac_secret", "set an HMAC secret or a key set")
	}
	return nil
}

// useAlgorithms takes the named algorithms, each one the kind of key useKey took verifies
// (by default HS256 for a secret, RS256 and ES256 for public keys).
func (v *IdentityVerifier) useAlgorithms(names []string) error {
	allowed := publicKeyAlgorithms
	if _, hmac := v.key.([]byte); hmac {
		allowed = hmacAlgorithms
		if len(names) == 0 {
			names = []string{string(jose.HS256)}
		}
	} else if len(names) == 0 {
		names = []string{string(jose.RS256), string(jose.ES256)}
	}
	for _, name := range names {
		alg := jose.SignatureAlgorithm(name)
		if !slices.Contains(allowed, alg) {
			return badIdentitySetting("algorithms", "%q is not one of %s (the algorithms of this kind of key)", name, joinAlgorithms(allowed))
		}
		v.algs = append(v.algs, alg)
	}
	return nil
}

func joinAlgorithms(algs []jose.SignatureAlgorithm) string {
	names := make([]string, len(algs))
	for i, a := range algs {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// parsePublicKeySet reads a JSON Web Key Set of signing public keys, each with its kid (a
// token names the key that signed it). A private or symmetric key is refused: the file is
// meant to hold what the login publishes, and a secret in it is a leak waiting to happen.
func parsePublicKeySet(raw []byte) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("the key set has no keys")
	}
	kids := make(map[string]bool, len(set.Keys))
	for i, k := range set.Keys {
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("key %d (kid %q) is not a public key; the set must hold only the login's public signing keys", i+1, k.KeyID)
		}
		switch {
		case k.KeyID == "":
			return nil, fmt.Errorf("key %d has no kid; tokens name their key by kid", i+1)
		case k.Use != "" && k.Use != "sig":
			return nil, fmt.Errorf("key %s is for %q, not for signatures", k.KeyID, k.Use)
		case kids[k.KeyID]:
			// go-jose tries only the first key of a kid: the second would never verify, and
			// whoever removes "the old key" may remove the wrong one.
			return nil, fmt.Errorf("kid %q names two keys; each key needs its own kid", k.KeyID)
		}
		kids[k.KeyID] = true
	}
	return &set, nil
}

// Why an identity token was refused: the problem's detail, so a shop's developer can tell a
// clock problem from a wrong key.
var (
	errTokenMissing   = errors.New("no identity token (Authorization: Bearer <token>)")
	errTokenMalformed = errors.New("not a signed JWT, or signed with an algorithm this API does not take")
	errTokenSignature = errors.New("its signature does not verify with the shop's keys")
	errTokenExpired   = errors.New("it has expired, or is not valid yet")
	errTokenNoExpiry  = errors.New("it has no expiry (exp)")
	errTokenNoIssued  = errors.New("it has no issue time (iat)")
	errTokenTooOld    = errors.New("it was issued too long ago, or to live longer than this API takes (exp - iat)")
	errTokenType      = errors.New("it is not the login's access token (typ)")
	errTokenAudience  = errors.New("it was issued by another issuer, or for another audience")
	errTokenSubject   = errors.New("its subject (sub) is not a customer id: " + shop.IDRule)
)

// Customer verifies token and returns its subject, the customer. The signature is checked
// before any claim is read.
func (v *IdentityVerifier) Customer(token string, now time.Time) (string, error) {
	if len(token) > maxIdentityTokenLen {
		return "", errTokenMalformed
	}
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		return "", errTokenMalformed
	}
	key := v.key
	if v.file != nil {
		key = v.file.keys(now)
	}
	var claims jwt.Claims
	if err := tok.Claims(key, &claims); err != nil {
		return "", errTokenSignature
	}
	switch {
	case claims.Expiry == nil:
		return "", errTokenNoExpiry
	case claims.IssuedAt == nil:
		return "", errTokenNoIssued
	case v.typ != "" && v.typ != tokenType(tok):
		return "", errTokenType
	}
	err = claims.ValidateWithLeeway(jwt.Expected{Issuer: v.issuer, AnyAudience: jwt.Audience{v.audience}, Time: now}, IdentityLeeway)
	issued := claims.IssuedAt.Time()
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer), errors.Is(err, jwt.ErrInvalidAudience):
		return "", errTokenAudience
	case err != nil:
		return "", errTokenExpired
	case claims.Expiry.Time().Sub(issued) > v.maxAge, now.Sub(issued) > v.maxAge+IdentityLeeway:
		return "", errTokenTooOld
	case !shop.ValidID(claims.Subject):
		return "", errTokenSubject
	}
	return claims.Subject, nil
}

// tokenType is the token's typ header as mediaType normalizes it, "" without one.
func tokenType(tok *jwt.JSONWebToken) string {
	if len(tok.Headers) == 0 {
		return ""
	}
	typ, _ := tok.Headers[0].ExtraHeaders[jose.HeaderType].(string)
	return mediaType(typ)
}

// mediaType is a typ as RFC 7515 (4.1.9) compares it: without "application/", which a typ
// may leave out, and in lower case, as media types are.
func mediaType(typ string) string {
	typ = strings.ToLower(strings.TrimSpace(typ))
	return strings.TrimPrefix(typ, "application/")
}

// useLogger names where a key set file's reloads are logged, unless one was named already.
func (v *IdentityVerifier) useLogger(l *slog.Logger) {
	if v != nil && v.file != nil {
		v.file.logger.CompareAndSwap(nil, l)
	}
}

// keySetFile is a key set read from a file, read again when the file changed. The look is
// made on the request path, at most every JWKSCheckInterval, by one request at a time; the
// others verify with the keys read last meanwhile. No goroutine: an API that verifies no
// token looks at nothing, and the first token after a change is judged by the new keys.
type keySetFile struct {
	path    string
	set     atomic.Pointer[jose.JSONWebKeySet]
	checked atomic.Int64 // UnixNano of the last look; 0: the next token looks
	logger  atomic.Pointer[slog.Logger]

	mu    sync.Mutex // one look at a time
	stamp fileStamp  // of the file the keys were read from
}

// fileStamp tells a changed file: a rewrite changes its modification time, and a Kubernetes
// volume's update swaps a symlink to a file with its own.
type fileStamp struct {
	mod  time.Time
	size int64
}

func openKeySetFile(path string) (*keySetFile, error) {
	f := &keySetFile{path: path}
	set, stamp, err := f.read()
	if err != nil {
		return nil, err
	}
	f.set.Store(set)
	f.stamp = stamp
	return f, nil
}

// read parses the file, and says which version of it was read.
func (f *keySetFile) read() (*jose.JSONWebKeySet, fileStamp, error) {
	info, err := os.Stat(f.path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	set, err := parsePublicKeySet(raw)
	if err != nil {
		return nil, fileStamp{}, fmt.Errorf("%s: %w", f.path, err)
	}
	return set, fileStamp{mod: info.ModTime(), size: info.Size()}, nil
}

// keys returns the key set, first reading the file again if it is time to look and it changed.
// A file that cannot be read or parsed (half written, deleted) keeps the keys read last, and
// is looked at again next time: refusing every buyer is not the answer to a bad deploy.
func (f *keySetFile) keys(now time.Time) *jose.JSONWebKeySet {
	if now.UnixNano()-f.checked.Load() < int64(JWKSCheckInterval) || !f.mu.TryLock() {
		return f.set.Load()
	}
	defer f.mu.Unlock()
	f.checked.Store(now.UnixNano())
	info, err := os.Stat(f.path)
	if err == nil && (fileStamp{mod: info.ModTime(), size: info.Size()}) == f.stamp {
		return f.set.Load()
	}
	set, stamp, err := f.read()
	logger := f.logger.Load()
	if logger == nil {
		logger = slog.Default()
	}
	if err != nil {
		logger.Error("identity key set not reloaded: verifying with the keys read last", "file", f.path, "err", err)
		return f.set.Load()
	}
	f.set.Store(set)
	f.stamp = stamp
	kids := make([]string, len(set.Keys))
	for i, k := range set.Keys {
		kids[i] = k.KeyID
	}
	logger.Info("identity key set reloaded", "file", f.path, "kids", kids)
	return set
}

// ctxCustomer holds the customer an identity token named.
const ctxCustomer = "customer"

// requireIdentity admits a checkout only with a valid identity token when identity tokens are
// on, and records its customer; it does nothing otherwise. A refused token is 401 with the
// reason, as RFC 6750 words it.
func (s *Server) requireIdentity(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.IdentityTokens == nil {
			return next(c)
		}
		err := errTokenMissing
		customer := ""
		if scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " "); strings.EqualFold(scheme, "Bearer") && token != "" {
			customer, err = s.cfg.IdentityTokens.Customer(token, time.Now())
		}
		if err != nil {
			challenge := `Bearer realm="checkout"`
			if !errors.Is(err, errTokenMissing) {
				challenge += `, error="invalid_token"`
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, challenge)
			return problem(http.StatusUnauthorized, "unauthorized", "identity token refused: "+err.Error())
		}
		c.Set(ctxCustomer, customer)
		return next(c)
	}
}

// identify makes the identity token's customer the checkout's: a body without customer_id
// takes it, and a body naming another customer is refused. 403, not 422: the body is well
// formed, and the caller proved who it is; what it may not do is act for someone else.
func identify(c echo.Context, req *CheckoutRequest) *Problem {
	customer, _ := c.Get(ctxCustomer).(string)
	switch {
	case customer == "":
		return nil
	case req.CustomerID == "":
		req.CustomerID = customer
		return nil
	case req.CustomerID != customer:
		detail := "must be the identity token's subject, or left out"
		p := problem(http.StatusForbidden, "customer_mismatch", "customer_id: "+detail)
		p.Errors = []FieldError{{"customer_id", detail}}
		return p
	}
	return nil
}

// callerScope is the namespace of the caller's Idempotency-Keys: its client, or its customer
// when an identity token named one; "" for the local stack and tests, where every caller
// shares one. One caller's keys then never collide with another's.
func callerScope(c echo.Context) string {
	if client, _ := c.Get(ctxClient).(string); client != "" {
		return "client/" + client
	}
	if customer, _ := c.Get(ctxCustomer).(string); customer != "" {
		return "customer/" + customer
	}
	return ""
}

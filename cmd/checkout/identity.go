package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
)

// The identity modes of IDENTITY_MODE: who the customer of a checkout is (docs/security.md).
// Unset is the local stack's: the body's customer_id as sent, which `checkout api` refuses.
const (
	// identityServer: the shop's backend calls with a client token (CLIENT_TOKENS), and the
	// customer_id it sends is trusted.
	identityServer = "server"
	// identityBrowser: the buyer's browser calls with a token the shop's login signed
	// (IDENTITY_JWT_*, IDENTITY_JWKS_FILE), and its subject is the customer.
	identityBrowser = "browser"
)

// identitySettings maps the settings api.NewIdentityVerifier names to their variables.
var identitySettings = map[string]string{
	"hmac_secret": "IDENTITY_JWT_HMAC_SECRET",
	"jwks":        "IDENTITY_JWKS_FILE",
	"algorithms":  "IDENTITY_JWT_ALGORITHMS",
	"issuer":      "IDENTITY_JWT_ISSUER",
	"audience":    "IDENTITY_JWT_AUDIENCE",
	"max_age":     "IDENTITY_JWT_MAX_AGE_SECONDS",
	"type":        "IDENTITY_JWT_TYPE",
}

// The bounds of IDENTITY_JWT_MAX_AGE_SECONDS: a minute leaves a login's clock and a slow
// page some room; a day is already far beyond an access token's life.
const (
	minIdentityMaxAge = time.Minute
	maxIdentityMaxAge = 24 * time.Hour
)

// identityEnv are the variables of the identity mode, as set: IDENTITY_MODE and, in browser
// mode, how the identity tokens are verified: IDENTITY_JWT_HMAC_SECRET (a secret shared with
// the shop's login) or IDENTITY_JWKS_FILE (a JSON Web Key Set of its public keys, read again
// when it changes), IDENTITY_JWT_ALGORITHMS, IDENTITY_JWT_ISSUER, IDENTITY_JWT_AUDIENCE,
// IDENTITY_JWT_MAX_AGE_SECONDS and IDENTITY_JWT_TYPE.
type identityEnv struct {
	mode, hmacSecret, jwksFile, algorithms, issuer, audience, maxAge, typ string
}

// readIdentity returns the identity mode and, in browser mode, its token verifier.
// clientTokens says whether CLIENT_TOKENS is set: server mode needs it, browser mode refuses
// it (both are the Authorization header's).
func readIdentity(env identityEnv, clientTokens bool) (string, *api.IdentityVerifier, error) {
	mode, secret, jwksFile := env.mode, env.hmacSecret, env.jwksFile
	settings := api.IdentitySettings{
		HMACSecret: []byte(secret), Algorithms: list(env.algorithms),
		Issuer: env.issuer, Audience: env.audience, JWKSFile: jwksFile, Type: env.typ,
	}
	switch mode {
	case "", identityServer:
		var errs []error
		for _, set := range []struct{ name, v string }{{"IDENTITY_JWT_HMAC_SECRET", secret}, {"IDENTITY_JWKS_FILE", jwksFile},
			{"IDENTITY_JWT_ALGORITHMS", env.algorithms}, {"IDENTITY_JWT_ISSUER", env.issuer}, {"IDENTITY_JWT_AUDIENCE", env.audience},
			{"IDENTITY_JWT_MAX_AGE_SECONDS", env.maxAge}, {"IDENTITY_JWT_TYPE", env.typ}} {
			if set.v != "" {
				errs = append(errs, fmt.Errorf("%s is set, but IDENTITY_MODE is %q: identity tokens are verified in browser mode only", set.name, mode))
			}
		}
		if mode == identityServer && !clientTokens {
			errs = append(errs, errors.New("IDENTITY_MODE=server: CLIENT_TOKENS must name the shop backends and their tokens (shop=<token>)"))
		}
		return mode, nil, errors.Join(errs...)
	case identityBrowser:
	default:
		return "", nil, fmt.Errorf("IDENTITY_MODE=%q: must be %s or %s", mode, identityServer, identityBrowser)
	}
	switch {
	case clientTokens:
		return "", nil, errors.New("IDENTITY_MODE=browser and CLIENT_TOKENS: choose one mode (both are bearer tokens of the Authorization header); unset CLIENT_TOKENS, or use IDENTITY_MODE=server")
	case secret == "" && jwksFile == "":
		return "", nil, errors.New("IDENTITY_MODE=browser: set IDENTITY_JWT_HMAC_SECRET (a secret shared with the shop's login) or IDENTITY_JWKS_FILE (a JSON Web Key Set of its public keys)")
	case secret != "" && jwksFile != "":
		return "", nil, errors.New("IDENTITY_JWT_HMAC_SECRET and IDENTITY_JWKS_FILE: set one, not both")
	}
	settings.MaxAge = api.DefaultIdentityTokenMaxAge
	if v := env.maxAge; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < int64(minIdentityMaxAge/time.Second) || n > int64(maxIdentityMaxAge/time.Second) {
			return "", nil, fmt.Errorf("IDENTITY_JWT_MAX_AGE_SECONDS=%q: must be an integer from %d to %d", v, int64(minIdentityMaxAge/time.Second), int64(maxIdentityMaxAge/time.Second))
		}
		settings.MaxAge = time.Duration(n) * time.Second
	}
	v, err := api.NewIdentityVerifier(settings)
	var bad *api.IdentitySettingError
	if errors.As(err, &bad) {
		return "", nil, fmt.Errorf("%s: %w", identitySettings[bad.Setting], bad.Err)
	}
	if err != nil {
		return "", nil, err
	}
	return mode, v, nil
}

// requireIdentity refuses to serve the API without an identity mode: a customer_id anyone can
// write would make every per-customer limit count whatever a script invents.
func (cfg config) requireIdentity() error {
	if cfg.IdentityMode != "" {
		return nil
	}
	return errors.New("IDENTITY_MODE is not set: server (the shop's backend calls with a CLIENT_TOKENS token and its customer_id is trusted) or browser (buyers' browsers call with the shop login's signed token: IDENTITY_JWT_HMAC_SECRET or IDENTITY_JWKS_FILE, IDENTITY_JWT_ISSUER, IDENTITY_JWT_AUDIENCE); see docs/security.md")
}

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// identityVariables are every variable readIdentity reads, cleared before each case.
var identityVariables = []string{"IDENTITY_MODE", "CLIENT_TOKENS", "IDENTITY_JWT_HMAC_SECRET", "IDENTITY_JWKS_FILE",
	"IDENTITY_JWT_ALGORITHMS", "IDENTITY_JWT_ISSUER", "IDENTITY_JWT_AUDIENCE", "IDENTITY_JWT_MAX_AGE_SECONDS", "IDENTITY_JWT_TYPE"}

// keySetFiles writes a JSON Web Key Set of one public key, and one holding its private key.
func keySetFiles(t *testing.T) (public, private string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, k any) string {
		raw, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k, KeyID: "login-1", Use: "sig"}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("jwks.json", &key.PublicKey), write("private.json", key)
}

// oneKidTwiceFile writes a JSON Web Key Set of two public keys under one kid.
func oneKidTwiceFile(t *testing.T) string {
	t.Helper()
	var set jose.JSONWebKeySet
	for range 2 {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &key.PublicKey, KeyID: "login-1", Use: "sig"})
	}
	raw, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// `checkout api` serves in one of two identity modes and refuses to start in neither, or in
// one set up by halves, naming the variable to fix. check-config judges the same.
func TestAPIRefusesToStartWithoutAnIdentityMode(t *testing.T) {
	jwks, privateJWKS := keySetFiles(t)
	browser := map[string]string{"IDENTITY_MODE": "browser", "IDENTITY_JWT_HMAC_SECRET": "the-shop-logins-hmac-secret-0123456789",
		"IDENTITY_JWT_ISSUER": "https://login.shop.test", "IDENTITY_JWT_AUDIENCE": "checkout-api"}
	with := func(base map[string]string, kv ...string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	server := map[string]string{"IDENTITY_MODE": "server", "CLIENT_TOKENS": "shop=a-real-client-token-0123456789"}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string // the variable the refusal names; "" starts
	}{
		{"neither mode", nil, "IDENTITY_MODE"},
		{"neither mode, client tokens set", map[string]string{"CLIENT_TOKENS": server["CLIENT_TOKENS"]}, "IDENTITY_MODE"},
		{"an unknown mode", map[string]string{"IDENTITY_MODE": "both"}, "IDENTITY_MODE"},
		{"server to server", server, ""},
		{"server without client tokens", map[string]string{"IDENTITY_MODE": "server"}, "CLIENT_TOKENS"},
		{"server with an identity setting", with(server, "IDENTITY_JWT_ISSUER", "https://login.shop.test"), "IDENTITY_JWT_ISSUER"},
		{"browser with an HMAC secret", browser, ""},
		{"browser with a key set", with(browser, "IDENTITY_JWT_HMAC_SECRET", "", "IDENTITY_JWKS_FILE", jwks), ""},
		{"browser with a key set and ES256 only", with(browser, "IDENTITY_JWT_HMAC_SECRET", "", "IDENTITY_JWKS_FILE", jwks, "IDENTITY_JWT_ALGORITHMS", "ES256"), ""},
		{"browser with neither secret nor keys", with(browser, "IDENTITY_JWT_HMAC_SECRET", ""), "IDENTITY_JWKS_FILE"},
		{"browser with both secret and keys", with(browser, "IDENTITY_JWKS_FILE", jwks), "IDENTITY_JWKS_FILE"},
		{"browser with a short HMAC secret", with(browser, "IDENTITY_JWT_HMAC_SECRET", "too-short"), "IDENTITY_JWT_HMAC_SECRET"},
		{"browser without an issuer", with(browser, "IDENTITY_JWT_ISSUER", ""), "IDENTITY_JWT_ISSUER"},
		{"browser without an audience", with(browser, "IDENTITY_JWT_AUDIENCE", ""), "IDENTITY_JWT_AUDIENCE"},
		{"browser allowing none", with(browser, "IDENTITY_JWT_ALGORITHMS", "HS256,none"), "IDENTITY_JWT_ALGORITHMS"},
		{"browser allowing RS256 with an HMAC secret", with(browser, "IDENTITY_JWT_ALGORITHMS", "RS256"), "IDENTITY_JWT_ALGORITHMS"},
		{"browser with a missing key set file", with(browser, "IDENTITY_JWT_HMAC_SECRET", "", "IDENTITY_JWKS_FILE", filepath.Join(t.TempDir(), "none.json")), "IDENTITY_JWKS_FILE"},
		{"browser with a private key in the key set", with(browser, "IDENTITY_JWT_HMAC_SECRET", "", "IDENTITY_JWKS_FILE", privateJWKS), "IDENTITY_JWKS_FILE"},
		{"browser and client tokens", with(browser, "CLIENT_TOKENS", server["CLIENT_TOKENS"]), "CLIENT_TOKENS"},
		{"browser with a key set naming one kid twice", with(browser, "IDENTITY_JWT_HMAC_SECRET", "", "IDENTITY_JWKS_FILE", oneKidTwiceFile(t)), "IDENTITY_JWKS_FILE"},
		{"browser with 10-minute access tokens", with(browser, "IDENTITY_JWT_MAX_AGE_SECONDS", "600", "IDENTITY_JWT_TYPE", "at+jwt"), ""},
		{"browser with tokens of a week", with(browser, "IDENTITY_JWT_MAX_AGE_SECONDS", "604800"), "IDENTITY_JWT_MAX_AGE_SECONDS"},
		{"browser with tokens of 10 seconds", with(browser, "IDENTITY_JWT_MAX_AGE_SECONDS", "10"), "IDENTITY_JWT_MAX_AGE_SECONDS"},
		{"browser with an empty media type", with(browser, "IDENTITY_JWT_TYPE", "application/"), "IDENTITY_JWT_TYPE"},
		{"server with a token type", with(server, "IDENTITY_JWT_TYPE", "at+jwt"), "IDENTITY_JWT_TYPE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range realSecrets {
				t.Setenv(k, v)
			}
			for _, k := range identityVariables {
				t.Setenv(k, tt.env[k])
			}
			var out strings.Builder
			err := checkConfig([]string{"api"}, &out)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check-config api = %v, want it valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check-config api = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// The binary itself stops before it connects to anything: `checkout api` with real secrets and
// no identity mode exits with the refusal, not with a connection error.
func TestCheckoutAPIStopsAtStartWithoutAnIdentityMode(t *testing.T) {
	for k, v := range realSecrets {
		t.Setenv(k, v)
	}
	for _, k := range identityVariables {
		t.Setenv(k, "")
	}
	// Nothing listens here: an attempt to connect would fail naming Postgres instead.
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable")
	err := run(t.Context(), "api", nil)
	if err == nil || !strings.Contains(err.Error(), "IDENTITY_MODE is not set") || strings.Contains(err.Error(), "postgres") {
		t.Errorf("checkout api without an identity mode: %v; want it refused at start, naming IDENTITY_MODE", err)
	}
}

// The local stack keeps working with neither mode (the body's customer_id as sent), and may
// run either.
func TestDevRunsInAnyIdentityMode(t *testing.T) {
	for _, k := range identityVariables {
		t.Setenv(k, "")
	}
	if cfg, err := loadConfig(true); err != nil || cfg.IdentityMode != "" || cfg.IdentityTokens != nil {
		t.Errorf("dev with neither mode: %q %v, want no mode and no error", cfg.IdentityMode, err)
	}
	var out strings.Builder
	if err := checkConfig([]string{"dev"}, &out); err != nil {
		t.Errorf("check-config dev with neither mode: %v", err)
	}
	t.Setenv("IDENTITY_MODE", "browser")
	t.Setenv("IDENTITY_JWT_HMAC_SECRET", "the-shop-logins-hmac-secret-0123456789")
	t.Setenv("IDENTITY_JWT_ISSUER", "https://login.shop.test")
	t.Setenv("IDENTITY_JWT_AUDIENCE", "checkout-api")
	if cfg, err := loadConfig(true); err != nil || cfg.IdentityTokens == nil {
		t.Errorf("dev in browser mode: %v, want a verifier", err)
	}
}

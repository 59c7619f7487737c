package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
)

// TestDevRefusesItsSecretsBeyondLoopback: the local stack's admin token and webhook secret
// are public (they are in the README). Served beyond loopback, anyone could set stock and
// forge payments, so `checkout dev` refuses them there; real secrets are fine anywhere.
func TestDevRefusesItsSecretsBeyondLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr, token, secret string
		ok                  bool
	}{
		{addr: "127.0.0.1:8080", ok: true},
		{addr: "localhost:8080", ok: true},
		{addr: "[::1]:8080", ok: true},
		{addr: "0.0.0.0:8080"},
		{addr: ":8080"},
		{addr: "192.168.1.20:8080"},
		{addr: "0.0.0.0:8080", token: devAdminToken, secret: "whsec_real_secret_value"},
		{addr: "0.0.0.0:8080", token: "a-real-admin-token-0123", secret: devWebhookSecret},
		{addr: "0.0.0.0:8080", token: "a-real-admin-token-0123", secret: "whsec_real_secret_value", ok: true},
	} {
		t.Run(tt.addr+" "+tt.token+" "+tt.secret, func(t *testing.T) {
			t.Setenv("API_ADDR", tt.addr)
			t.Setenv("ADMIN_TOKEN", tt.token)
			t.Setenv("STRIPE_WEBHOOK_SECRET", tt.secret)
			t.Setenv("CHECKOUT_SECRET_KEY", realSecrets["CHECKOUT_SECRET_KEY"])
			_, err := loadConfig(true)
			switch {
			case tt.ok && err != nil:
				t.Errorf("loadConfig(dev) = %v, want no error", err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "API_ADDR")):
				t.Errorf("loadConfig(dev) = %v, want an error naming API_ADDR", err)
			}
		})
	}
}

// TEMPORAL_GRPC_COMPRESSION takes none (the default) or gzip; anything else is refused by name.
func TestTemporalCompressionIsNoneUnlessGzipIsAsked(t *testing.T) {
	for _, tt := range []struct {
		value    string
		wantGzip bool
		wantErr  bool
	}{
		{value: ""},
		{value: "none"},
		{value: "gzip", wantGzip: true},
		{value: "zstd", wantErr: true},
		{value: "GZIP", wantErr: true},
	} {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv("TEMPORAL_GRPC_COMPRESSION", tt.value)
			cfg, err := loadConfig(true)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "TEMPORAL_GRPC_COMPRESSION") {
					t.Errorf("loadConfig = %v, want an error naming TEMPORAL_GRPC_COMPRESSION", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig = %v, want no error", err)
			}
			if cfg.TemporalGzip != tt.wantGzip {
				t.Errorf("TemporalGzip = %v, want %v", cfg.TemporalGzip, tt.wantGzip)
			}
		})
	}
}

// CATALOG_CACHE_SIZE bounds the API's catalog cache: unset, the default; a count from 1 up is
// taken; anything else stops the process at start, by name.
func TestCatalogCacheSizeIsACountOfAtLeastOne(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    int64
		wantErr bool
	}{
		{value: "", want: store.DefaultCatalogCacheSize},
		{value: "1", want: 1},
		{value: "50000", want: 50_000},
		{value: "0", wantErr: true},
		{value: "-5", wantErr: true},
		{value: "lots", wantErr: true},
		{value: "100000000", wantErr: true},
	} {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv("CATALOG_CACHE_SIZE", tt.value)
			cfg, err := loadConfig(true)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "CATALOG_CACHE_SIZE") {
					t.Errorf("loadConfig = %v, want an error naming CATALOG_CACHE_SIZE", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig = %v, want no error", err)
			}
			if cfg.CatalogSize != tt.want {
				t.Errorf("CatalogSize = %d, want %d", cfg.CatalogSize, tt.want)
			}
		})
	}
}

// realSecrets is an environment `checkout api` accepts (server-to-server identity); each case
// changes one value.
var realSecrets = map[string]string{
	"ADMIN_TOKEN":           "a-real-admin-token-0123456789",
	"STRIPE_WEBHOOK_SECRET": "whsec_a_real_endpoint_secret_0123",
	"CHECKOUT_SECRET_KEY":   "a-real-checkout-secret-key-0123456789abc",
	"IDENTITY_MODE":         "server",
	"CLIENT_TOKENS":         "shop=a-real-client-token-0123456789",
}

// `checkout api` signs buyers' checkout secrets with CHECKOUT_SECRET_KEY: unset, the local
// stack's public key or a key under 32 bytes would let anyone forge them, so it refuses to
// start, naming the setting. A comma-separated list (a rotation) is checked key by key.
func TestAPIRefusesAWeakCheckoutSecretKey(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		wantKeys    []string // nil: refused
	}{
		{"a real key", realSecrets["CHECKOUT_SECRET_KEY"], []string{realSecrets["CHECKOUT_SECRET_KEY"]}},
		{"a rotation", " new-checkout-secret-key-0123456789abcdef , old-checkout-secret-key-0123456789abcdef ",
			[]string{"new-checkout-secret-key-0123456789abcdef", "old-checkout-secret-key-0123456789abcdef"}},
		{"unset", "", nil},
		{"the local stack's key", devCheckoutSecretKey, nil},
		{"31 bytes", strings.Repeat("k", 31), nil},
		{"a rotation with a short old key", "new-checkout-secret-key-0123456789abcdef,short", nil},
		{"a rotation with the local stack's key", "new-checkout-secret-key-0123456789abcdef," + devCheckoutSecretKey, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range realSecrets {
				t.Setenv(k, v)
			}
			t.Setenv("CHECKOUT_SECRET_KEY", tt.value)
			cfg, err := loadConfig(false)
			if err != nil {
				t.Fatalf("loadConfig = %v", err)
			}
			err = cfg.requireSecrets()
			switch {
			case tt.wantKeys == nil && (err == nil || !strings.Contains(err.Error(), "CHECKOUT_SECRET_KEY")):
				t.Errorf("requireSecrets = %v, want an error naming CHECKOUT_SECRET_KEY", err)
			case tt.wantKeys != nil && err != nil:
				t.Errorf("requireSecrets = %v, want none", err)
			case tt.wantKeys != nil && !slices.Equal(cfg.CheckoutSecretKeys, tt.wantKeys):
				t.Errorf("keys %q, want %q", cfg.CheckoutSecretKeys, tt.wantKeys)
			}
		})
	}
	// The local stack signs with its own key when none is set, and refuses to serve it
	// beyond loopback, as it does its other public secrets.
	t.Setenv("CHECKOUT_SECRET_KEY", "")
	if cfg, err := loadConfig(true); err != nil || !slices.Equal(cfg.CheckoutSecretKeys, []string{devCheckoutSecretKey}) {
		t.Errorf("dev: keys %q, %v; want the local stack's key", cfg.CheckoutSecretKeys, err)
	}
	t.Setenv("ADMIN_TOKEN", realSecrets["ADMIN_TOKEN"])
	t.Setenv("STRIPE_WEBHOOK_SECRET", realSecrets["STRIPE_WEBHOOK_SECRET"])
	t.Setenv("API_ADDR", "0.0.0.0:8080")
	if _, err := loadConfig(true); err == nil || !strings.Contains(err.Error(), "CHECKOUT_SECRET_KEY") {
		t.Errorf("dev beyond loopback with the local checkout key: %v, want an error naming CHECKOUT_SECRET_KEY", err)
	}
}

// `checkout api` refuses secrets anyone can read (the local stack's and the scale stack's,
// both in the README) and a Stripe secret that cannot be an endpoint signing secret: those
// start whsec_ and carry at least 24 characters after it.
func TestAPIRefusesPublishedOrWeakSecrets(t *testing.T) {
	for _, tt := range []struct {
		name, variable, value string
		ok                    bool
	}{
		{"real values", "", "", true},
		{"the local stack's admin token", "ADMIN_TOKEN", devAdminToken, false},
		{"the scale stack's admin token", "ADMIN_TOKEN", "scale-local-admin-token", false},
		{"an admin token of 15 characters", "ADMIN_TOKEN", strings.Repeat("a", 15), false},
		{"the local stack's webhook secret", "STRIPE_WEBHOOK_SECRET", devWebhookSecret, false},
		{"the scale stack's webhook secret", "STRIPE_WEBHOOK_SECRET", "whsec_scale_local_secret", false},
		{"a webhook secret without whsec_", "STRIPE_WEBHOOK_SECRET", "a_real_endpoint_secret_0123456789", false},
		{"a one-character webhook secret", "STRIPE_WEBHOOK_SECRET", "x", false},
		{"whsec_ and 23 characters", "STRIPE_WEBHOOK_SECRET", "whsec_" + strings.Repeat("s", 23), false},
		{"whsec_ and 24 characters", "STRIPE_WEBHOOK_SECRET", "whsec_" + strings.Repeat("s", 24), true},
		{"a rotation with one weak secret", "STRIPE_WEBHOOK_SECRET", realSecrets["STRIPE_WEBHOOK_SECRET"] + ",whsec_short", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range realSecrets {
				t.Setenv(k, v)
			}
			if tt.variable != "" {
				t.Setenv(tt.variable, tt.value)
			}
			cfg, err := loadConfig(false)
			if err != nil {
				t.Fatalf("loadConfig = %v", err)
			}
			err = cfg.requireSecrets()
			switch {
			case tt.ok && err != nil:
				t.Errorf("requireSecrets = %v, want none", err)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.variable)):
				t.Errorf("requireSecrets = %v, want an error naming %s", err, tt.variable)
			}
		})
	}
}

// `checkout check-config <command>` answers what `checkout <command>` would say of the
// environment at start, and connects to nothing: the API's secrets are checked for api only.
func TestCheckConfigJudgesTheEnvironmentAsTheCommandWould(t *testing.T) {
	for k, v := range realSecrets {
		t.Setenv(k, v)
	}
	var out strings.Builder
	if err := checkConfig([]string{"api"}, &out); err != nil || !strings.Contains(out.String(), "checkout api") {
		t.Errorf("check-config api with real secrets: %v %q, want it valid", err, out.String())
	}
	t.Setenv("ADMIN_TOKEN", devAdminToken)
	if err := checkConfig([]string{"api"}, &out); err == nil || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Errorf("check-config api with the local stack's admin token: %v, want an error naming ADMIN_TOKEN", err)
	}
	if err := checkConfig([]string{"worker"}, &out); err != nil {
		t.Errorf("check-config worker: %v, want valid (the worker serves no secrets)", err)
	}
	t.Setenv("CATALOG_CACHE_SIZE", "0")
	if err := checkConfig([]string{"worker"}, &out); err == nil || !strings.Contains(err.Error(), "CATALOG_CACHE_SIZE") {
		t.Errorf("check-config worker with a bad value: %v, want an error naming it", err)
	}
	for _, args := range [][]string{nil, {"serve"}, {"api", "worker"}} {
		if err := checkConfig(args, &out); err == nil {
			t.Errorf("check-config %q: no error", args)
		}
	}
}

// The settings table names each variable once, with a line of doc, and every default (the
// local stack's too) is a value its own setting takes: a bad default would stop every start.
func TestEverySettingHasOneNameADocAndAValidDefault(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range settings(&config{}) {
		if seen[s.name] {
			t.Errorf("%s is in the settings table twice", s.name)
		}
		seen[s.name] = true
		if s.doc == "" || strings.Contains(s.doc, "\n") {
			t.Errorf("%s: doc %q, want one line", s.name, s.doc)
		}
		for _, dev := range []bool{false, true} {
			if err := s.set(s, s.defaultFor(dev)); err != nil {
				t.Errorf("%s: default %q (dev %v) is refused: %v", s.name, s.defaultFor(dev), dev, err)
			}
		}
	}
}

// CHECKOUT_SECRET_GRACE_DAYS reaches the API in days, 30 unless set, and a value out of its
// bounds is refused by name.
func TestCheckoutSecretGraceIsReadInDays(t *testing.T) {
	for _, tt := range []struct {
		value string
		days  int
		ok    bool
	}{
		{"", 30, true},
		{"7", 7, true},
		{"0", 0, false},
		{"forever", 0, false},
	} {
		t.Run(tt.value, func(t *testing.T) {
			t.Setenv("CHECKOUT_SECRET_GRACE_DAYS", tt.value)
			cfg, err := loadConfig(true)
			switch {
			case tt.ok && (err != nil || cfg.CheckoutSecretGrace != time.Duration(tt.days)*24*time.Hour):
				t.Errorf("grace %s, %v; want %d days", cfg.CheckoutSecretGrace, err, tt.days)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), "CHECKOUT_SECRET_GRACE_DAYS")):
				t.Errorf("loadConfig = %v, want an error naming CHECKOUT_SECRET_GRACE_DAYS", err)
			}
		})
	}
}

// WORKER_BUILD_ID turns Worker Versioning on for the worker, as a build of WORKER_DEPLOYMENT
// (checkout unless set); unset, the worker is unversioned. Names Temporal could not keep in a
// version string are refused by name.
func TestWorkerBuildIsReadFromTheEnvironment(t *testing.T) {
	for _, tt := range []struct {
		buildID, deployment string
		want                worker.Build
		bad                 string // the variable the error must name
	}{
		{want: worker.Build{Deployment: "checkout"}},
		{buildID: "3f2c1ab", want: worker.Build{Deployment: "checkout", ID: "3f2c1ab"}},
		{buildID: "v1.4.0", deployment: "shop-checkout", want: worker.Build{Deployment: "shop-checkout", ID: "v1.4.0"}},
		{buildID: "build one", bad: "WORKER_BUILD_ID"},
		{buildID: strings.Repeat("x", 256), bad: "WORKER_BUILD_ID"},
		{buildID: "3f2c1ab", deployment: "shop.checkout", bad: "WORKER_DEPLOYMENT"},
	} {
		t.Run(tt.buildID+" "+tt.deployment, func(t *testing.T) {
			t.Setenv("WORKER_BUILD_ID", tt.buildID)
			t.Setenv("WORKER_DEPLOYMENT", tt.deployment)
			if _, err := loadConfig(true); tt.want.Versioned() && (err == nil || !strings.Contains(err.Error(), "WORKER_BUILD_ID")) {
				t.Errorf("checkout dev with a build id: %v, want it refused (nothing makes the build current there)", err)
			}
			cfg, err := loadConfig(false)
			switch {
			case tt.bad == "" && (err != nil || cfg.WorkerBuild != tt.want):
				t.Errorf("build %+v, %v; want %+v", cfg.WorkerBuild, err, tt.want)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Errorf("loadConfig = %v, want an error naming %s", err, tt.bad)
			}
		})
	}
}

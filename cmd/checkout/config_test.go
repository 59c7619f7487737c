package main

import (
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/store"
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

package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// Each request leaves one "http request" line with its method, path, final status (the
// error handler's, for a refused request), duration and the problem's code.
func TestRequestLogLineHasTheFinalStatusAndProblemCode(t *testing.T) {
	var buf bytes.Buffer
	e := api.New(api.Config{}, api.Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/checkouts/not%20an%20id", nil))
	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("GET of a bad id answered %d, want 422", rec.Code)
	}
	line := requestLine(t, &buf)
	want := map[string]any{"level": "INFO", "method": "GET", "path": "/v1/checkouts/not an id", "status": 422.0, "code": "invalid_request"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("request line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if _, ok := line["duration_ms"].(float64); !ok {
		t.Errorf("request line has no duration_ms: %v", line)
	}
	if _, ok := line["checkout_id"]; ok {
		t.Errorf("request line names a checkout for a request that has none: %v", line)
	}
}

// requestLine returns the one "http request" line in a JSON log.
func requestLine(t *testing.T, log *bytes.Buffer) map[string]any {
	t.Helper()
	var found map[string]any
	dec := json.NewDecoder(log)
	for dec.More() {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("read log: %v", err)
		}
		if line["msg"] == "http request" {
			if found != nil {
				t.Fatalf("two request lines: %v and %v", found, line)
			}
			found = line
		}
	}
	if found == nil {
		t.Fatalf("no request line in the log")
	}
	return found
}

// The request line names who asked: the client's address (as the limits see it, before
// any prefix), the caller (client/<name> in server mode; in browser mode a hash of the
// customer, never the id itself), and whether the admin token was used, on checkout,
// cancel, support and inventory requests alike.
func TestRequestLogLineNamesTheAddressAndTheCaller(t *testing.T) {
	tokens, err := api.ParseClientTokens("shop=" + shopToken)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	server := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.ClientTokens = tokens
		d.Owners = d.Records.(api.CheckoutOwners)
		d.Logger = logger
	})
	browser := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.IdentityTokens = hmacIdentity(t)
		d.Logger = logger
	})
	customer := testenv.RandomID("u-")
	cart := `{"cart_id":"c-log","customer_id":"` + customer + `","items":[{"sku":"NOPE","quantity":1}]}`
	for _, tc := range []struct {
		name   string
		send   func() *httptest.ResponseRecorder
		addr   string
		caller string
		admin  bool
	}{
		{"a shop backend's checkout", func() *httptest.ResponseRecorder {
			return server.postAs(t, "203.0.113.9", "Bearer "+shopToken, cart)
		}, "203.0.113.9", "client/shop", false},
		{"a shop backend's cancel", func() *httptest.ResponseRecorder {
			return server.send(t, "2001:db8::9", http.MethodPost, "/v1/checkouts/c-log/cancel", bearer(shopToken))
		}, "2001:db8::9", "client/shop", false},
		{"a buyer's checkout", func() *httptest.ResponseRecorder {
			return browser.postAs(t, "198.51.100.9", "Bearer "+loginToken(t, customer), cart)
		}, "198.51.100.9", "customer/", false},
		{"a stranger's read", func() *httptest.ResponseRecorder {
			return browser.send(t, "198.51.100.10", http.MethodGet, "/v1/checkouts/c-log", nil)
		}, "198.51.100.10", "", false},
		{"support's read", func() *httptest.ResponseRecorder {
			return browser.send(t, "192.0.2.1", http.MethodGet, "/v1/checkouts/not%20an%20id", bearer(testAdminToken))
		}, "192.0.2.1", "", true},
		{"support's cancel", func() *httptest.ResponseRecorder {
			return browser.send(t, "192.0.2.1", http.MethodPost, "/v1/admin/checkouts/not%20an%20id/cancel", bearer(testAdminToken))
		}, "192.0.2.1", "", true},
		{"an inventory read", func() *httptest.ResponseRecorder {
			return browser.send(t, "192.0.2.2", http.MethodGet, "/v1/inventory/NOPE", bearer(testAdminToken))
		}, "192.0.2.2", "", true},
		{"an inventory read without the token", func() *httptest.ResponseRecorder {
			return browser.send(t, "192.0.2.3", http.MethodGet, "/v1/inventory/NOPE", nil)
		}, "192.0.2.3", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			tc.send()
			line := requestLine(t, &buf)
			if line["client_address"] != tc.addr {
				t.Errorf("client_address = %v, want %s (line %v)", line["client_address"], tc.addr, line)
			}
			caller, _ := line["caller"].(string)
			switch {
			case tc.caller == "customer/":
				if !strings.HasPrefix(caller, "customer/") || len(caller) < len("customer/")+8 || strings.Contains(caller, customer) {
					t.Errorf("caller = %q, want customer/ and a hash of the customer, not its id (line %v)", caller, line)
				}
			case caller != tc.caller:
				t.Errorf("caller = %q, want %q (line %v)", caller, tc.caller, line)
			}
			if admin, _ := line["admin"].(bool); admin != tc.admin {
				t.Errorf("admin = %v, want %v (line %v)", line["admin"], tc.admin, line)
			}
		})
	}
}

// send is a request from addr with header, no body.
func (h *harness) send(t *testing.T, addr, method, path string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	return h.serveFrom(net.JoinHostPort(addr, "40000"), request{method: method, path: path, header: header})
}

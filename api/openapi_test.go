package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/openapitest"
)

// echoParam is a path parameter as Echo spells it (":cart_id"); OpenAPI spells it {cart_id}.
var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// TestOpenAPIDescribesEveryRoute: the routes Echo serves and the operations of
// api/openapi.json are the same set, both ways.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	v, err := openapitest.API()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, r := range api.New(api.Config{}, api.Deps{}).Routes() {
		if r.Method == echo.RouteNotFound { // a group's catch-all, not a route of the API
			continue
		}
		if strings.Contains(r.Path, "*") {
			t.Errorf("route %s %s has a wildcard, which OpenAPI cannot describe", r.Method, r.Path)
		}
		served[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	documented := map[string]bool{}
	for path, item := range v.Document().Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	if missing := difference(served, documented); len(missing) > 0 {
		t.Errorf("routes the API serves that api/openapi.json does not describe:\n  %s", strings.Join(missing, "\n  "))
	}
	if extra := difference(documented, served); len(extra) > 0 {
		t.Errorf("operations api/openapi.json describes that the API does not serve:\n  %s", strings.Join(extra, "\n  "))
	}
}

// difference lists the keys of a that b lacks, sorted.
func difference(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestServesOpenAPIDocument: GET /openapi.json answers the embedded document as JSON.
func TestServesOpenAPIDocument(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	rec := h.do(t, request{method: http.MethodGet, path: "/openapi.json"})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi.json = %d %s, want 200", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get(echo.HeaderContentType); ct != echo.MIMEApplicationJSON {
		t.Errorf("Content-Type = %q, want %s", ct, echo.MIMEApplicationJSON)
	}
	if !bytes.Equal(rec.Body.Bytes(), api.OpenAPIDocument()) {
		t.Error("GET /openapi.json does not answer api/openapi.json")
	}
	var doc struct{ OpenAPI string }
	decodeJSON(t, rec, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
}

// TestOpenAPICheckCatchesDrift: the check every API and e2e test runs refuses what the
// document does not allow, so a route or an answer that drifts from it fails those tests.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	v, err := openapitest.API()
	if err != nil {
		t.Fatal(err)
	}
	problem := func(status int, code string) string {
		return fmt.Sprintf(`{"type":"about:blank","title":%q,"status":%d,"code":%q,"detail":"x"}`, http.StatusText(status), status, code)
	}
	view := `{"checkout_id":"c-1","workflow_id":"checkout-c-1","status":"awaiting_payment","customer_id":"u-1",` +
		`"currency":"usd","amount_cents":100,"items":[],"expires_at":null,"order_id":null,"reason":null,` +
		`"needs_attention":false,"links":{"self":"/v1/checkouts/c-1","temporal_ui":"http://localhost:8233/x"}}`
	created := strings.Replace(view, `"links"`, `"checkout_secret":"`+api.CheckoutSecret(api.DevCheckoutSecretKey, "c-1")+`","links"`, 1)
	cart := `{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"S","quantity":1}]}`
	buyer := map[string]string{api.CheckoutSecretHeader: "s"}
	jsonHeader := func(ct string, kv ...string) http.Header {
		h := http.Header{"Content-Type": {ct}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name         string
		method, path string
		reqBody      string
		reqHeader    map[string]string
		status       int
		header       http.Header
		body         string
		wantErr      string // "" when the document allows the exchange
	}{
		{name: "a documented answer", method: "POST", path: "/v1/checkouts", reqBody: cart, status: 201,
			header: jsonHeader("application/json", "Location", "/v1/checkouts/c-1"), body: created},
		{name: "a 201 without the checkout secret", method: "POST", path: "/v1/checkouts", reqBody: cart, status: 201,
			header: jsonHeader("application/json", "Location", "/v1/checkouts/c-1"), body: view, wantErr: "checkout_secret"},
		{name: "a read answering the checkout secret", method: "GET", path: "/v1/checkouts/c-1", reqHeader: buyer, status: 200,
			header: jsonHeader("application/json"), body: created, wantErr: "checkout_secret"},
		{name: "a read without the secret answered 200", method: "GET", path: "/v1/checkouts/c-1", status: 200,
			header: jsonHeader("application/json"), body: view, wantErr: "refuses"},
		{name: "a read without the secret answered 404", method: "GET", path: "/v1/checkouts/c-1", status: 404,
			header: jsonHeader("application/problem+json"), body: problem(404, "not_found")},
		{name: "an undocumented status", method: "GET", path: "/healthz", status: 202,
			header: jsonHeader("application/json"), body: `{"status":"ok"}`, wantErr: "status is not supported"},
		{name: "an undocumented field", method: "GET", path: "/v1/checkouts/c-1", reqHeader: buyer, status: 200,
			header: jsonHeader("application/json"), body: strings.Replace(view, `"reason":null`, `"reason":null,"extra":1`, 1), wantErr: "extra"},
		{name: "a 201 without Location", method: "POST", path: "/v1/checkouts", reqBody: cart, status: 201,
			header: jsonHeader("application/json"), body: created, wantErr: "Location"},
		{name: "a 503 without Retry-After", method: "POST", path: "/v1/checkouts", reqBody: cart, status: 503,
			header: jsonHeader("application/problem+json"), body: problem(503, "no_worker"), wantErr: "Retry-After"},
		{name: "a problem code the answer does not list", method: "POST", path: "/v1/checkouts/c-1/cancel", status: 409,
			header: jsonHeader("application/problem+json"), body: problem(409, "out_of_stock"), wantErr: "already_confirmed"},
		{name: "a refused request answered 200", method: "POST", path: "/v1/checkouts", reqBody: `{"cart_id":"c-1"}`, status: 201,
			header: jsonHeader("application/json", "Location", "/v1/checkouts/c-1"), body: created, wantErr: "refuses"},
		{name: "a refused request answered 422", method: "POST", path: "/v1/checkouts", reqBody: `{"cart_id":"c-1"}`, status: 422,
			header: jsonHeader("application/problem+json"), body: problem(422, "invalid_request")},
		{name: "no bearer token answered 200", method: "GET", path: "/v1/inventory/S", status: 200,
			header: jsonHeader("application/json", "ETag", `"v1"`),
			body:   `{"sku":"S","on_hand":1,"available":1,"held":0,"sold":0,"price_cents":1,"currency":"usd","max_per_order":1}`, wantErr: "refuses"},
		{name: "a view as text", method: "GET", path: "/v1/checkouts/c-1", reqHeader: buyer, status: 200,
			header: jsonHeader("text/plain"), body: view, wantErr: "text/plain"},
		{name: "a time that is not a date-time", method: "GET", path: "/v1/checkouts/c-1", reqHeader: buyer, status: 200,
			header: jsonHeader("application/json"), body: strings.Replace(view, `"expires_at":null`, `"expires_at":"soon"`, 1), wantErr: "date-time"},
		{name: "a cart sent as text answered 201", method: "POST", path: "/v1/checkouts", reqBody: cart,
			reqHeader: map[string]string{"Content-Type": "text/plain"}, status: 201,
			header: jsonHeader("application/json", "Location", "/v1/checkouts/c-1"), body: created, wantErr: "refuses"},
		{name: "an undocumented route answered 200", method: "GET", path: "/v1/nothing", status: 200,
			header: jsonHeader("application/json"), body: `{}`, wantErr: "no matching operation"},
		{name: "an undocumented route answered 404", method: "GET", path: "/v1/nothing", status: 404,
			header: jsonHeader("application/problem+json"), body: problem(404, "not_found")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.reqBody))
			if tt.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, val := range tt.reqHeader {
				req.Header.Set(k, val)
			}
			// Twice: Check remembers its verdicts, and a repeat must fail again.
			for range 2 {
				err := v.Check(t.Context(), openapitest.Exchange{Request: req, RequestBody: []byte(tt.reqBody),
					Status: tt.status, Header: tt.header, Body: []byte(tt.body)})
				switch {
				case tt.wantErr == "" && err != nil:
					t.Errorf("Check = %v, want nil", err)
				case tt.wantErr != "" && err == nil:
					t.Errorf("Check = nil, want an error naming %q", tt.wantErr)
				case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
					t.Errorf("Check = %v, want an error naming %q", err, tt.wantErr)
				}
			}
		})
	}
}

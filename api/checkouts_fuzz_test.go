package api_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/openapitest"
)

// FuzzCheckoutRequest sends arbitrary bodies and Idempotency-Keys to POST /v1/checkouts. The
// catalog is empty, so every cart that passes validation is answered 422 unknown_sku before
// any saga would start; the Temporal stand-in is never called. No input may panic or get a
// 5xx, and none may be answered 2xx.
func FuzzCheckoutRequest(f *testing.F) {
	s := newFuzzServer(f)
	seeds := []struct{ body, key string }{
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"PHONE-X","quantity":2}],"payment_timeout_seconds":900}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"PHONE-X","quantity":1}]}`, "key-1"},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1},{"sku":"A","quantity":1}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":0}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":-9223372036854775808}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":9223372036854775807}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1e3}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}],"payment_timeout_seconds":0}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}],"payment_timeout_seconds":86401}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}],"payment_timeout_seconds":null}`, ""},
		{`{"cart_id":"","customer_id":"","items":[]}`, ""},
		{`{"cart_id":"c/1","customer_id":"u 1","items":null}`, ""},
		{`{"cart_id":"` + strings.Repeat("c", 65) + `","customer_id":"u","items":[{"sku":"A","quantity":1}]}`, ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}]}`, strings.Repeat("k", 256)},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}]}`, "bad key\x00"},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[{"sku":"A","quantity":1}],"extra":true}`, ""},
		{`{"cart_id":"c-1"} {"cart_id":"c-2"}`, ""},
		{`{"cart_id":1}`, ""},
		{`{"items":[{"sku":["A"]}]}`, ""},
		{`[]`, ""},
		{`null`, ""},
		{``, ""},
		{`{"cart_id":"\u0000","customer_id":"\ud800","items":[{"sku":"\uffff","quantity":1}]}`, ""},
		{"{\"cart_id\":\"\xff\"}", ""},
		{`{"cart_id":"c-1","customer_id":"u-1","items":[` + strings.TrimSuffix(strings.Repeat(`{"sku":"S","quantity":1},`, 51), ",") + `]}`, ""},
	}
	for _, sd := range seeds {
		f.Add([]byte(sd.body), sd.key)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/checkouts", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		calls := s.temporal.calls.Load()
		openapitest.Handler(t, s.e).ServeHTTP(rec, req) // checked against api/openapi.json
		if rec.Code >= 500 || rec.Code < 400 {
			t.Fatalf("status %d, want a 4xx (empty catalog): %s", rec.Code, rec.Body)
		}
		if n := s.temporal.calls.Load() - calls; n != 0 {
			t.Fatalf("status %d after %d Temporal calls; want none", rec.Code, n)
		}
	})
}

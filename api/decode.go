// The checkout request: strict JSON decoding, the checks that need no lookup, its fingerprint.

package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Contract limits on checkout requests.
const (
	maxCartLines         = 50
	maxIdempotencyKeyLen = 255
)

// CheckoutRequest is the body of POST /v1/checkouts.
type CheckoutRequest struct {
	CartID                string        `json:"cart_id"`
	CustomerID            string        `json:"customer_id"`
	Items                 []RequestItem `json:"items"`
	PaymentTimeoutSeconds *int64        `json:"payment_timeout_seconds"`
}

// RequestItem is one cart line as the client sends it.
type RequestItem struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// decodeStrict reads a JSON body strictly: unknown fields and trailing data are refused, so
// a misspelt field never silently falls back to a default.
func decodeStrict(body io.Reader, v any) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return readError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if dec.More() {
		return problem(http.StatusBadRequest, "invalid_json", "body must be one JSON object")
	}
	return nil
}

func readError(err error) error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return problem(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
	}
	return problem(http.StatusBadRequest, "unreadable_body", "request body could not be read")
}

// jsonProblem names the field of a JSON decoding error where the decoder knows it.
func jsonProblem(err error) *Problem {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return problem(http.StatusBadRequest, "invalid_json", "body must be a JSON object")
	case errors.As(err, &typeErr):
		detail, field := "must be "+jsonKind(typeErr.Type), fieldPath(typeErr.Field)
		p := problem(http.StatusBadRequest, "invalid_json", field+": "+detail)
		p.Errors = []FieldError{{Field: field, Detail: detail}}
		return p
	case errors.As(err, &syntaxErr):
		return problem(http.StatusBadRequest, "invalid_json", fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		p := problem(http.StatusBadRequest, "invalid_json", field+": unknown field")
		p.Errors = []FieldError{{Field: field, Detail: "unknown field"}}
		return p
	case errors.Is(err, io.EOF):
		return problem(http.StatusBadRequest, "invalid_json", "request body is empty")
	}
	return problem(http.StatusBadRequest, "invalid_json", "malformed JSON")
}

// fieldPath writes the decoder's path to a field the way the API's other problems do:
// Go 1.27's decoder names an element's index as a segment ("items.0.quantity"), which
// becomes "items[0].quantity"; Go 1.26's names none ("items.quantity").
func fieldPath(path string) string {
	var b strings.Builder
	for i, seg := range strings.Split(path, ".") {
		switch _, err := strconv.Atoi(seg); {
		case err == nil && i > 0:
			b.WriteString("[" + seg + "]")
		case i > 0:
			b.WriteString("." + seg)
		default:
			b.WriteString(seg)
		}
	}
	return b.String()
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "an object"
}

// validateCheckout checks everything that needs no lookup, naming each bad field.
func validateCheckout(req CheckoutRequest, key string, maxTimeout int64) *Problem {
	var errs []FieldError
	bad := func(field, detail string) { errs = append(errs, FieldError{field, detail}) }
	if !shop.ValidID(req.CartID) {
		bad("cart_id", shop.IDRule)
	}
	if !shop.ValidID(req.CustomerID) {
		bad("customer_id", shop.IDRule)
	}
	switch {
	case len(req.Items) == 0:
		bad("items", "must have at least one line")
	case len(req.Items) > maxCartLines:
		bad("items", fmt.Sprintf("must have at most %d lines, has %d", maxCartLines, len(req.Items)))
	}
	seen := map[string]int{}
	for i, it := range req.Items {
		field := fmt.Sprintf("items[%d]", i)
		if !shop.ValidID(it.SKU) {
			bad(field+".sku", shop.IDRule)
		} else if j, dup := seen[it.SKU]; dup {
			bad(field+".sku", fmt.Sprintf("duplicates items[%d]: one line per SKU", j))
		}
		seen[it.SKU] = i
		if it.Quantity < 1 {
			bad(field+".quantity", "must be at least 1")
		}
	}
	if t := req.PaymentTimeoutSeconds; t != nil && (*t < workflows.MinPaymentTimeoutSeconds || *t > maxTimeout) {
		bad("payment_timeout_seconds", fmt.Sprintf("must be between %d and %d (longer holds only through support's extend)", workflows.MinPaymentTimeoutSeconds, maxTimeout))
	}
	if key != "" && len(key) > maxIdempotencyKeyLen || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		bad("Idempotency-Key", fmt.Sprintf("must be 1 to %d visible ASCII characters", maxIdempotencyKeyLen))
	}
	if len(errs) > 0 {
		return invalid("invalid_request", errs...)
	}
	return nil
}

// maxPaymentTimeout is the longest payment window a client may ask for.
func (s *Server) maxPaymentTimeout() int64 {
	if m := s.cfg.MaxPaymentTimeoutSeconds; m > 0 {
		return min(m, workflows.MaxPaymentTimeoutSeconds)
	}
	return DefaultMaxPaymentTimeoutSeconds
}

// requestHash fingerprints what a checkout was started with: the same cart sent again (in
// any line order) hashes the same.
func requestHash(req CheckoutRequest, timeout int64) string {
	items := append([]RequestItem(nil), req.Items...)
	sort.Slice(items, func(i, j int) bool { return items[i].SKU < items[j].SKU })
	b, _ := json.Marshal(struct {
		CartID, CustomerID string
		Items              []RequestItem
		Timeout            int64
	}{req.CartID, req.CustomerID, items, timeout})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Package stripetest is a small local Stripe API for tests: it speaks Stripe's wire format
// for the calls package payments makes, keeps state, and records every request. Tests of other
// packages point payments.NewStripe at it with payments.WithStripeAPIURL(server.URL()).
package stripetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Server is a small local Stripe API on httptest: it speaks Stripe's wire format
// (form-encoded requests, JSON answers, Stripe's error envelope and status codes), keeps
// PaymentIntents and refunds, replays the first answer for a repeated Idempotency-Key the way
// Stripe does, and records every request it receives. It implements only what payments uses:
// POST /v1/refunds and GET /v1/payment_intents/search. Like Stripe, a refund leaves its
// PaymentIntent at status succeeded with its amount_received; what was given back is the
// amount_refunded of the PaymentIntent's latest charge.
type Server struct {
	t   testing.TB
	srv *httptest.Server
	key string // the secret key it accepts

	mu       sync.Mutex
	requests []Request
	intents  []*Intent
	refunds  []Refund
	byKey    map[string]savedAnswer // Idempotency-Key → first answer
	script   []Answer               // answers for the next POST /v1/refunds, in order
	nextID   int
}

type Request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Form   url.Values // the form-encoded body (POST)
}

type Intent struct {
	ID             string
	CheckoutID     string
	Status         string
	Amount         int64
	AmountReceived int64
	Currency       string
	Refunded       int64 // the amount_refunded of its charge
}

type Refund struct {
	ID            string
	PaymentIntent string
	Amount        int64
	Currency      string
	Metadata      map[string]string
}

type savedAnswer struct {
	params string // the request body, to spot a key reused with other parameters
	status int
	body   []byte
}

// Answer is one answer forced onto the next refund request. An answer with a status below
// 500 is saved under the request's Idempotency-Key (Stripe saves the result of every request that
// began executing); a 5xx is not, as if it came from in front of Stripe's idempotency layer, so a
// retry with the same key reaches Stripe again.
type Answer struct {
	Status  int
	ErrType string
	Code    string
	Message string
}

func New(t testing.TB) *Server {
	t.Helper()
	f := &Server{t: t, key: "sk_test_fake_" + strconv.Itoa(len(t.Name())), byKey: map[string]savedAnswer{}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the base URL to give payments.WithStripeAPIURL.
func (f *Server) URL() string { return f.srv.URL }

// Key is the secret key the server accepts.
func (f *Server) Key() string { return f.key }

// AddIntent stores a PaymentIntent and returns its id.
func (f *Server) AddIntent(checkoutID, status string, amount int64, currency string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	pi := &Intent{ID: fmt.Sprintf("pi_fake%04d", f.nextID), CheckoutID: checkoutID, Status: status, Amount: amount, Currency: currency}
	if status == "succeeded" {
		pi.AmountReceived = amount
	}
	f.intents = append(f.intents, pi)
	return pi.ID
}

// FailNextRefunds forces the answers of the next refund requests.
func (f *Server) FailNextRefunds(answers ...Answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, answers...)
}

func (f *Server) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

func (f *Server) Refunds() []Refund {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Refund(nil), f.refunds...)
}

// ServeHTTP answers one request as Stripe would.
func (f *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := readForm(r)
	if err != nil {
		writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "", "unreadable body: "+err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	form, _ := url.ParseQuery(body)
	f.requests = append(f.requests, Request{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Form: form,
	})
	w.Header().Set("Request-Id", fmt.Sprintf("req_fake%04d", len(f.requests)))

	if r.Header.Get("Authorization") != "Bearer "+f.key {
		writeStripeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided.")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		f.createRefund(w, r, body, form)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
		f.searchIntents(w, r.URL.Query())
	default:
		writeStripeError(w, http.StatusNotFound, "invalid_request_error", "",
			fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path))
	}
}

func readForm(r *http.Request) (string, error) {
	if r.Method != http.MethodPost {
		return "", nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		return "", fmt.Errorf("content type %q", ct)
	}
	raw, err := io.ReadAll(r.Body)
	return string(raw), err
}

// createRefund is POST /v1/refunds, called with f.mu held.
func (f *Server) createRefund(w http.ResponseWriter, r *http.Request, body string, form url.Values) {
	key := r.Header.Get("Idempotency-Key")
	if saved, ok := f.byKey[key]; ok && key != "" {
		if saved.params != body {
			writeStripeError(w, http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+key+"' if you meant to execute a different request.")
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, saved.status, saved.body)
		return
	}
	status, answer := f.refundAnswer(form)
	raw, err := json.Marshal(answer)
	if err != nil {
		f.t.Errorf("fake stripe: marshal answer: %v", err)
	}
	if key != "" && status < 500 {
		f.byKey[key] = savedAnswer{params: body, status: status, body: raw}
	}
	writeRaw(w, status, raw)
}

// refundAnswer decides the answer to a refund request that is not a replay.
func (f *Server) refundAnswer(form url.Values) (int, any) {
	if len(f.script) > 0 {
		a := f.script[0]
		f.script = f.script[1:]
		return a.Status, errorEnvelope(a.ErrType, a.Code, a.Message)
	}
	piID := form.Get("payment_intent")
	if piID == "" {
		return http.StatusBadRequest, errorEnvelope("invalid_request_error", "parameter_missing", "One of the following params should be provided for this request: payment_intent or charge.")
	}
	var pi *Intent
	for _, candidate := range f.intents {
		if candidate.ID == piID {
			pi = candidate
		}
	}
	if pi == nil {
		return http.StatusNotFound, errorEnvelope("invalid_request_error", "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", piID))
	}
	if pi.Status != "succeeded" {
		return http.StatusBadRequest, errorEnvelope("invalid_request_error", "charge_not_refundable", "This PaymentIntent does not have a successful charge to refund.")
	}
	left := pi.AmountReceived - pi.Refunded
	if left == 0 {
		return http.StatusBadRequest, errorEnvelope("invalid_request_error", "charge_already_refunded", fmt.Sprintf("Charge ch_%s has already been refunded.", pi.ID))
	}
	amount := left
	if s := form.Get("amount"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return http.StatusBadRequest, errorEnvelope("invalid_request_error", "parameter_invalid_integer", "Invalid positive integer")
		}
		if n > left {
			return http.StatusBadRequest, errorEnvelope("invalid_request_error", "amount_too_large", fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", n, left))
		}
		amount = n
	}
	metadata := map[string]string{}
	for k, v := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok && strings.HasSuffix(name, "]") {
			metadata[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	pi.Refunded += amount
	ref := Refund{
		ID: fmt.Sprintf("re_fake%04d", len(f.refunds)+1), PaymentIntent: pi.ID, Amount: amount,
		Currency: pi.Currency, Metadata: metadata,
	}
	f.refunds = append(f.refunds, ref)
	return http.StatusOK, map[string]any{
		"id": ref.ID, "object": "refund", "amount": ref.Amount, "currency": ref.Currency,
		"payment_intent": ref.PaymentIntent, "charge": "ch_" + pi.ID, "status": "succeeded",
		"metadata": ref.Metadata, "created": 1764410400,
	}
}

// searchQuery is the one query shape the fake understands; anything else is a 400, like a query
// Stripe's search grammar rejects.
var searchQuery = regexp.MustCompile(`^metadata\['checkout_id'\]:'([^'\\]*)' AND status:'([a-z_]+)'$`)

// searchIntents is GET /v1/payment_intents/search, called with f.mu held.
func (f *Server) searchIntents(w http.ResponseWriter, q url.Values) {
	m := searchQuery.FindStringSubmatch(q.Get("query"))
	if m == nil {
		writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_string", "Invalid search query.")
		return
	}
	limit := 10
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "Invalid integer: "+s)
			return
		}
		limit = n
	}
	expandCharge := false
	for _, field := range expands(q) {
		if field != "data.latest_charge" {
			writeStripeError(w, http.StatusBadRequest, "invalid_request_error", "",
				fmt.Sprintf("This property cannot be expanded (%s).", field))
			return
		}
		expandCharge = true
	}
	data := []map[string]any{}
	matches := 0
	for _, pi := range f.intents {
		if pi.CheckoutID != m[1] || pi.Status != m[2] {
			continue
		}
		matches++
		if len(data) < limit {
			data = append(data, map[string]any{
				"id": pi.ID, "object": "payment_intent", "amount": pi.Amount,
				"amount_received": pi.AmountReceived, "currency": pi.Currency, "status": pi.Status,
				"latest_charge": latestCharge(pi, expandCharge),
				"metadata":      map[string]string{"checkout_id": pi.CheckoutID},
			})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "search_result", "url": "/v1/payment_intents/search", "data": data,
		"has_more": matches > len(data), "next_page": nil,
	})
}

// expands is the fields a request asks to expand: expand[]=... or expand[0]=..., as clients
// send them.
func expands(q url.Values) []string {
	var fields []string
	for k, vs := range q {
		if k == "expand" || k == "expand[]" || strings.HasPrefix(k, "expand[") && strings.HasSuffix(k, "]") {
			fields = append(fields, vs...)
		}
	}
	return fields
}

// latestCharge is a PaymentIntent's latest_charge as Stripe answers it: the charge's id, or
// the charge itself when expanded. Its amount_refunded is what refunds gave back; a
// PaymentIntent that never succeeded has no charge here.
func latestCharge(pi *Intent, expand bool) any {
	if pi.Status != "succeeded" {
		return nil
	}
	id := "ch_" + pi.ID
	if !expand {
		return id
	}
	return map[string]any{
		"id": id, "object": "charge", "payment_intent": pi.ID, "status": "succeeded", "paid": true, "captured": true,
		"amount": pi.AmountReceived, "amount_captured": pi.AmountReceived, "amount_refunded": pi.Refunded,
		"refunded": pi.Refunded > 0 && pi.Refunded >= pi.AmountReceived, "currency": pi.Currency,
	}
}

func errorEnvelope(errType, code, message string) map[string]any {
	e := map[string]any{"type": errType, "message": message}
	if code != "" {
		e["code"] = code
	}
	return map[string]any{"error": e}
}

func writeStripeError(w http.ResponseWriter, status int, errType, code, message string) {
	writeJSON(w, status, errorEnvelope(errType, code, message))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	writeRaw(w, status, raw)
}

func writeRaw(w http.ResponseWriter, status int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

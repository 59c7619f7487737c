package payments_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
)

func newProvider(f *stripetest.Server, opts ...payments.StripeOption) *payments.Stripe {
	return payments.NewStripe(f.Key(), append([]payments.StripeOption{payments.WithStripeAPIURL(f.URL())}, opts...)...)
}

// onlyRequest is the one request the provider sent, checked to be method path with the
// secret key as its bearer token.
func onlyRequest(t *testing.T, f *stripetest.Server, method, path string) stripetest.Request {
	t.Helper()
	reqs := f.Requests()
	if len(reqs) != 1 {
		t.Fatalf("stripe got %d requests, want 1: %+v", len(reqs), reqs)
	}
	r := reqs[0]
	if r.Method != method || r.Path != path {
		t.Errorf("request %s %s, want %s %s", r.Method, r.Path, method, path)
	}
	if got, want := r.Header.Get("Authorization"), "Bearer "+f.Key(); got != want {
		t.Errorf("Authorization %q, want %q", got, want)
	}
	return r
}

// wantRefunds fails the test unless the fake holds exactly n refunds.
func wantRefunds(t *testing.T, f *stripetest.Server, n int) {
	t.Helper()
	if got := f.Refunds(); len(got) != n {
		t.Errorf("stripe holds %d refunds, want %d: %+v", len(got), n, got)
	}
}

// wantRequests is the fake's requests, failing the test at once unless there are exactly n.
func wantRequests(t *testing.T, f *stripetest.Server, n int) []stripetest.Request {
	t.Helper()
	reqs := f.Requests()
	if len(reqs) != n {
		t.Fatalf("stripe got %d requests, want %d: %+v", len(reqs), n, reqs)
	}
	return reqs
}

// wantErrorContains fails the test unless err's text contains want.
func wantErrorContains(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

// wantNotRefused fails the test if err says the refund was refused for good.
func wantNotRefused(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, payments.ErrRefundRefused) {
		t.Errorf("error %v is ErrRefundRefused, want a retryable error", err)
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStripeProviderIsNamedStripe(t *testing.T) {
	var p payments.Provider = payments.NewStripe("sk_test_x")
	if got := p.Name(); got != "stripe" {
		t.Errorf("Name() = %q, want stripe", got)
	}
}

func TestRefundInFullSendsStripeWireFormat(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-123", "succeeded", 199800, "usd")
	p := newProvider(f)

	got, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: pi, Currency: "usd", IdempotencyKey: "refund-c-123-" + pi, Reason: "paid after expiry",
	})
	if err != nil {
		t.Fatalf("refund: %v", err)
	}
	if want := (payments.Refund{ID: "re_fake0001", Status: "succeeded", AmountCents: 199800}); got != want {
		t.Errorf("refund %+v, want %+v", got, want)
	}

	r := onlyRequest(t, f, http.MethodPost, "/v1/refunds")
	for header, want := range map[string]string{
		"Idempotency-Key": "refund-c-123-" + pi,
		"Content-Type":    "application/x-www-form-urlencoded",
	} {
		if got := r.Header.Get(header); got != want {
			t.Errorf("header %s %q, want %q", header, got, want)
		}
	}
	if r.Header.Get("Stripe-Version") == "" {
		t.Error("no Stripe-Version header")
	}
	// No amount: a full refund.
	wantForm := map[string][]string{
		"payment_intent":            {pi},
		"metadata[reason]":          {"paid after expiry"},
		"metadata[idempotency_key]": {"refund-c-123-" + pi},
		"metadata[currency]":        {"usd"},
	}
	if got := map[string][]string(r.Form); !reflect.DeepEqual(got, wantForm) {
		t.Errorf("form %v, want %v", got, wantForm)
	}

	refunds := f.Refunds()
	if len(refunds) != 1 {
		t.Fatalf("stripe holds %d refunds, want 1", len(refunds))
	}
	wantMeta := map[string]string{"reason": "paid after expiry", "idempotency_key": "refund-c-123-" + pi, "currency": "usd"}
	if got := refunds[0].Metadata; !reflect.DeepEqual(got, wantMeta) {
		t.Errorf("refund metadata %v, want %v", got, wantMeta)
	}
}

func TestRefundPartialSendsAmount(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-124", "succeeded", 199800, "usd")
	p := newProvider(f)

	got, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 500, IdempotencyKey: "refund-c-124-" + pi})
	if err != nil {
		t.Fatalf("refund: %v", err)
	}
	if got.AmountCents != 500 {
		t.Errorf("refunded %d cents, want 500", got.AmountCents)
	}

	form := wantRequests(t, f, 1)[0].Form
	if got := form.Get("amount"); got != "500" {
		t.Errorf("amount %q, want 500", got)
	}
	if got := form.Get("payment_intent"); got != pi {
		t.Errorf("payment_intent %q, want %q", got, pi)
	}
	if form.Has("metadata[reason]") {
		t.Error("metadata[reason] sent, want none: no reason given")
	}
	if form.Has("currency") {
		t.Error("currency sent, want none: it only applies to customer-balance refunds")
	}
}

func TestRefundRepeatedKeyReturnsTheSameRefund(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-125", "succeeded", 5000, "eur")
	p := newProvider(f)
	req := payments.RefundRequest{PaymentRef: pi, AmountCents: 1000, Currency: "eur", IdempotencyKey: "refund-c-125-" + pi, Reason: "wrong amount"}

	first, err := p.Refund(testContext(t), req)
	if err != nil {
		t.Fatalf("first refund: %v", err)
	}
	second, err := p.Refund(testContext(t), req)
	if err != nil {
		t.Fatalf("second refund: %v", err)
	}

	if first != second {
		t.Errorf("second refund %+v, want the first %+v", second, first)
	}
	wantRefunds(t, f, 1) // a repeated key must not refund twice
	reqs := wantRequests(t, f, 2)
	if a, b := reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key"); a != b {
		t.Errorf("Idempotency-Key %q then %q, want the same", a, b)
	}
	if !reflect.DeepEqual(reqs[0].Form, reqs[1].Form) {
		t.Errorf("form %v then %v, want the same", reqs[0].Form, reqs[1].Form)
	}
}

func TestRefundServerErrorsAreRetryableUntilStripeAnswers(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-126", "succeeded", 2500, "usd")
	p := newProvider(f)
	f.FailNextRefunds(
		stripetest.Answer{Status: 500, ErrType: "api_error", Message: "An unknown error occurred"},
		stripetest.Answer{Status: 500, ErrType: "api_error", Message: "An unknown error occurred"},
	)
	req := payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "refund-c-126-" + pi}

	for attempt := 1; attempt <= 2; attempt++ {
		_, err := p.Refund(testContext(t), req)
		if err == nil {
			t.Fatalf("attempt %d: refund succeeded, want stripe's 500", attempt)
		}
		wantNotRefused(t, err) // a 500 is worth retrying
		wantErrorContains(t, err, "refund payment "+pi+": stripe answered 500 api_error: An unknown error occurred")
		var se *stripe.Error
		if !errors.As(err, &se) {
			t.Fatalf("attempt %d: error %v, want a *stripe.Error in its chain", attempt, err)
		}
		if se.HTTPStatusCode != 500 {
			t.Errorf("attempt %d: stripe error status %d, want 500", attempt, se.HTTPStatusCode)
		}
	}
	got, err := p.Refund(testContext(t), req)
	if err != nil {
		t.Fatalf("third refund: %v", err)
	}
	if want := (payments.Refund{ID: "re_fake0001", Status: "succeeded", AmountCents: 2500}); got != want {
		t.Errorf("refund %+v, want %+v", got, want)
	}

	// stripe-go does not retry a Stripe error answer itself: one request per call, so Temporal's
	// retry policy is the only loop. All three carried the same key.
	for i, r := range wantRequests(t, f, 3) {
		if got := r.Header.Get("Idempotency-Key"); got != "refund-c-126-"+pi {
			t.Errorf("request %d: Idempotency-Key %q, want %q", i, got, "refund-c-126-"+pi)
		}
	}
	wantRefunds(t, f, 1)
}

func TestRefundAlreadyRefundedIsSuccess(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-127", "succeeded", 4200, "usd")
	p := newProvider(f)
	_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "support-manual-refund"})
	if err != nil {
		t.Fatalf("manual refund: %v", err)
	}

	// The saga's own refund comes later with its own key: Stripe answers charge_already_refunded.
	got, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "refund-c-127-" + pi})
	if err != nil {
		t.Fatalf("saga's refund: %v", err)
	}
	if want := (payments.Refund{Status: "succeeded"}); got != want {
		t.Errorf("refund %+v, want %+v (no new refund: empty ID)", got, want)
	}
	wantRefunds(t, f, 1)
	if got := wantRequests(t, f, 2)[1].Header.Get("Idempotency-Key"); got != "refund-c-127-"+pi {
		t.Errorf("second request's Idempotency-Key %q, want %q", got, "refund-c-127-"+pi)
	}
}

func TestRefundRefusedForGood(t *testing.T) {
	tests := []struct {
		name    string
		script  *stripetest.Answer
		ref     func(f *stripetest.Server) string
		amount  int64
		message string
	}{
		{
			name:    "charge disputed",
			script:  &stripetest.Answer{Status: 400, ErrType: "invalid_request_error", Code: "charge_disputed", Message: "Charge ch_1 has been charged back; cannot issue a refund."},
			message: "stripe answered 400 invalid_request_error charge_disputed: Charge ch_1 has been charged back; cannot issue a refund.",
		},
		{
			name:    "unknown payment intent",
			ref:     func(*stripetest.Server) string { return "pi_does_not_exist" },
			message: "stripe answered 404 invalid_request_error resource_missing: No such payment_intent: 'pi_does_not_exist'",
		},
		{
			name:    "amount larger than what is left",
			amount:  999999,
			message: "stripe answered 400 invalid_request_error amount_too_large",
		},
		{
			name:    "card error",
			script:  &stripetest.Answer{Status: 402, ErrType: "card_error", Code: "expired_card", Message: "The card has expired."},
			message: "stripe answered 402 card_error expired_card: The card has expired.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := stripetest.New(t)
			pi := f.AddIntent("c-128", "succeeded", 1000, "usd")
			if tt.ref != nil {
				pi = tt.ref(f)
			}
			if tt.script != nil {
				f.FailNextRefunds(*tt.script)
			}
			p := newProvider(f)

			_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: tt.amount, IdempotencyKey: "refund-c-128-" + pi})
			if !errors.Is(err, payments.ErrRefundRefused) {
				t.Fatalf("error %v, want ErrRefundRefused", err)
			}
			wantErrorContains(t, err, "refund payment "+pi+": refund refused by payment provider: "+tt.message)
			wantErrorContains(t, err, "(request req_fake0001)")
			var se *stripe.Error
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want the *stripe.Error still reachable", err)
			}
			wantRefunds(t, f, 0)
		})
	}
}

func TestRefundKeyReusedWithOtherParametersIsRefused(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-129", "succeeded", 1000, "usd")
	p := newProvider(f)
	_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 100, IdempotencyKey: "refund-c-129"})
	if err != nil {
		t.Fatalf("first refund: %v", err)
	}

	_, err = p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 200, IdempotencyKey: "refund-c-129"})
	if !errors.Is(err, payments.ErrRefundRefused) {
		t.Fatalf("error %v, want ErrRefundRefused", err)
	}
	wantErrorContains(t, err, "idempotency_error")
	wantRefunds(t, f, 1)
}

func TestRefundTransientStripeAnswersAreNotRefused(t *testing.T) {
	tests := []stripetest.Answer{
		{Status: 429, ErrType: "invalid_request_error", Code: "rate_limit", Message: "Too many requests hit the API too quickly."},
		{Status: 429, ErrType: "invalid_request_error", Code: "lock_timeout", Message: "This object cannot be accessed right now because another API request or Stripe process is currently accessing it."},
		{Status: 409, ErrType: "idempotency_error", Code: "idempotency_key_in_use", Message: "There is currently another in-progress request using this Idempotent Key."},
		{Status: 503, ErrType: "api_error", Message: "Service unavailable"},
		{Status: 401, ErrType: "invalid_request_error", Message: "Expired API Key provided: sk_test_***"},
	}
	for _, answer := range tests {
		t.Run(answer.Code+answer.Message[:8], func(t *testing.T) {
			f := stripetest.New(t)
			pi := f.AddIntent("c-130", "succeeded", 1000, "usd")
			f.FailNextRefunds(answer)
			// No stripe-go retries, so the 429 lock_timeout (which it would retry) reaches us.
			p := newProvider(f, payments.WithStripeNetworkRetries(0))

			_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "refund-c-130-" + pi})
			if err == nil {
				t.Fatal("refund succeeded, want the scripted answer's error")
			}
			wantNotRefused(t, err)
			if errors.Is(err, payments.ErrInvalidRequest) {
				t.Errorf("error %v is ErrInvalidRequest, want a retryable error", err)
			}
			wantRefunds(t, f, 0)
		})
	}
}

func TestRefundNetworkErrorsAreRetryable(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(url), payments.WithStripeNetworkRetries(0))

		_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: "pi_1", IdempotencyKey: "refund-c-1-pi_1"})
		if err == nil {
			t.Fatal("refund succeeded, want a connection error")
		}
		wantNotRefused(t, err)
		wantErrorContains(t, err, "refund payment pi_1: ")
	})

	t.Run("no answer within the timeout", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL),
			payments.WithStripeTimeout(200*time.Millisecond), payments.WithStripeNetworkRetries(0))

		start := time.Now()
		_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: "pi_1", IdempotencyKey: "refund-c-1-pi_1"})
		if err == nil {
			t.Fatal("refund succeeded, want a timeout")
		}
		wantNotRefused(t, err)
		if took := time.Since(start); took >= 5*time.Second {
			t.Errorf("the call took %v, want the HTTP timeout to end it within 5s", took)
		}
	})

	t.Run("stripe-go resends a dropped request with the same key", func(t *testing.T) {
		f := stripetest.New(t)
		pi := f.AddIntent("c-131", "succeeded", 700, "usd")
		var mu sync.Mutex
		var dropped []string
		// In front of the fake: the first request's connection is closed without an answer.
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			first := len(dropped) == 0
			if first {
				dropped = append(dropped, r.Header.Get("Idempotency-Key"))
			}
			mu.Unlock()
			if first {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = conn.Close()
				}
				return
			}
			f.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		p := payments.NewStripe(f.Key(), payments.WithStripeAPIURL(front.URL)) // default retries

		got, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "refund-c-131-" + pi})
		if err != nil {
			t.Fatalf("refund: %v", err)
		}
		if got.AmountCents != 700 {
			t.Errorf("refunded %d cents, want 700", got.AmountCents)
		}
		if want := []string{"refund-c-131-" + pi}; !slices.Equal(dropped, want) {
			t.Fatalf("dropped requests with keys %q, want %q", dropped, want)
		}
		if got := wantRequests(t, f, 1)[0].Header.Get("Idempotency-Key"); got != "refund-c-131-"+pi {
			t.Errorf("resent request's Idempotency-Key %q, want %q", got, "refund-c-131-"+pi)
		}
		wantRefunds(t, f, 1)
	})
}

func TestRefundInvalidInputSendsNothing(t *testing.T) {
	tests := map[string]payments.RefundRequest{
		"no payment ref":       {IdempotencyKey: "k"},
		"no idempotency key":   {PaymentRef: "pi_1"},
		"key over 255 chars":   {PaymentRef: "pi_1", IdempotencyKey: strings.Repeat("k", 256)},
		"negative amount":      {PaymentRef: "pi_1", IdempotencyKey: "k", AmountCents: -1},
		"negative amount, big": {PaymentRef: "pi_1", IdempotencyKey: "k", AmountCents: -199800},
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			f := stripetest.New(t)
			_, err := newProvider(f).Refund(testContext(t), req)
			if !errors.Is(err, payments.ErrInvalidRequest) {
				t.Fatalf("error %v, want ErrInvalidRequest", err)
			}
			wantNotRefused(t, err)
			wantRequests(t, f, 0)
		})
	}
}

func TestFindSucceededReturnsThePaymentOfTheCheckout(t *testing.T) {
	f := stripetest.New(t)
	f.AddIntent("c-200", "requires_payment_method", 199800, "usd")
	f.AddIntent("c-201", "succeeded", 5000, "usd")
	pi := f.AddIntent("c-200", "succeeded", 199800, "usd")
	p := newProvider(f)

	got, err := p.FindSucceeded(testContext(t), "c-200")
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	wantPayments(t, got, payments.Payment{Ref: pi, CheckoutID: "c-200", AmountCents: 199800, Currency: "usd"})

	r := onlyRequest(t, f, http.MethodGet, "/v1/payment_intents/search")
	if got, want := r.Query.Get("query"), "metadata['checkout_id']:'c-200' AND status:'succeeded'"; got != want {
		t.Errorf("query %q, want %q", got, want)
	}
	if got := r.Query.Get("limit"); got != "10" {
		t.Errorf("limit %q, want 10", got)
	}
	if got := r.Header.Get("Idempotency-Key"); got != "" {
		t.Errorf("Idempotency-Key %q, want none: a read carries no key", got)
	}
}

// wantPayments fails the test unless got is exactly want, in order.
func wantPayments(t *testing.T, got []payments.Payment, want ...payments.Payment) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("payments %+v, want %+v", got, want)
	}
}

func TestFindSucceededNoneIsNil(t *testing.T) {
	f := stripetest.New(t)
	f.AddIntent("c-300", "canceled", 1000, "usd")
	f.AddIntent("c-3000", "succeeded", 1000, "usd")
	p := newProvider(f)

	got, err := p.FindSucceeded(testContext(t), "c-300")
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	if got != nil {
		t.Errorf("payments %+v, want nil", got)
	}
	wantRequests(t, f, 1)
}

func TestFindSucceededUsesAmountWhenNothingReceivedIsReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false,
			"data": []map[string]any{{
				"id": "pi_old", "object": "payment_intent", "amount": 1234, "currency": "gbp",
				"status": "succeeded", "metadata": map[string]string{"checkout_id": "c-301"},
			}},
		})
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))

	got, err := p.FindSucceeded(testContext(t), "c-301")
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	wantPayments(t, got, payments.Payment{Ref: "pi_old", CheckoutID: "c-301", AmountCents: 1234, Currency: "gbp"})
}

// An earlier payment of the wrong amount (not refunded yet) must not hide the right one, as it
// did when the search asked for one result.
func TestFindSucceededReturnsEveryPaymentOfTheCheckout(t *testing.T) {
	f := stripetest.New(t)
	wrong := f.AddIntent("c-400", "succeeded", 100, "usd")
	right := f.AddIntent("c-400", "succeeded", 199800, "usd")
	got, err := newProvider(f).FindSucceeded(testContext(t), "c-400")
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	wantPayments(t, got,
		payments.Payment{Ref: wrong, CheckoutID: "c-400", AmountCents: 100, Currency: "usd"},
		payments.Payment{Ref: right, CheckoutID: "c-400", AmountCents: 199800, Currency: "usd"},
	)
}

// Stripe keeps a refunded PaymentIntent at status succeeded, with its amount_received: the
// refund is on its charge. A payment given back, in full or in part, is not one a checkout may
// keep, so the search leaves it out.
func TestFindSucceededLeavesOutRefundedPayments(t *testing.T) {
	f := stripetest.New(t)
	refunded := f.AddIntent("c-500", "succeeded", 199800, "usd")
	partly := f.AddIntent("c-500", "succeeded", 199800, "usd")
	kept := f.AddIntent("c-500", "succeeded", 199800, "usd")
	p := newProvider(f)
	for _, r := range []payments.RefundRequest{
		{PaymentRef: refunded, IdempotencyKey: "refund-c-500-" + refunded},
		{PaymentRef: partly, AmountCents: 100, IdempotencyKey: "refund-c-500-" + partly},
	} {
		if _, err := p.Refund(testContext(t), r); err != nil {
			t.Fatalf("refund %s: %v", r.PaymentRef, err)
		}
	}

	got, err := p.FindSucceeded(testContext(t), "c-500")
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	wantPayments(t, got, payments.Payment{Ref: kept, CheckoutID: "c-500", AmountCents: 199800, Currency: "usd"})
}

// Whether a payment was refunded is read from its expanded latest charge. An answer that
// names the charge without it cannot tell a refunded payment from a kept one: an error, which
// the next reconciliation asks again, rather than a refunded payment passed off as paying.
func TestFindSucceededRefusesAnAnswerWithoutTheCharge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "search_result", "url": "/v1/payment_intents/search", "has_more": false,
			"data": []map[string]any{{
				"id": "pi_1", "object": "payment_intent", "amount": 1234, "amount_received": 1234, "currency": "usd",
				"status": "succeeded", "latest_charge": "ch_1", "metadata": map[string]string{"checkout_id": "c-501"},
			}},
		})
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))

	got, err := p.FindSucceeded(testContext(t), "c-501")
	if got != nil {
		t.Errorf("payments %+v, want nil", got)
	}
	wantErrorContains(t, err, "find payment of checkout c-501: payment intent pi_1: latest charge ch_1 is not expanded")
}

func TestFindSucceededRejectsIDsThatCouldChangeTheQuery(t *testing.T) {
	for _, id := range []string{
		"",
		"c-1' OR status:'succeeded",
		"c-1'",
		`c-1\`,
		"c 1",
		"c-1 AND -metadata['x']:'y'",
		"çart",
		strings.Repeat("a", 65),
	} {
		t.Run(id, func(t *testing.T) {
			f := stripetest.New(t)
			got, err := newProvider(f).FindSucceeded(testContext(t), id)
			if !errors.Is(err, payments.ErrInvalidRequest) {
				t.Fatalf("error %v, want ErrInvalidRequest", err)
			}
			if got != nil {
				t.Errorf("payments %+v, want nil", got)
			}
			wantRequests(t, f, 0) // nothing may reach Stripe
		})
	}
	t.Run("longest valid id", func(t *testing.T) {
		f := stripetest.New(t)
		id := strings.Repeat("a", 62) + "._"
		if _, err := newProvider(f).FindSucceeded(testContext(t), id); err != nil {
			t.Fatalf("find: %v", err)
		}
		wantRequests(t, f, 1)
	})
}

func TestFindSucceededServerErrorIsReturned(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"type": "api_error", "message": "An unknown error occurred"}})
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))

	got, err := p.FindSucceeded(testContext(t), "c-302")
	if err == nil {
		t.Fatal("find succeeded, want stripe's 500")
	}
	if got != nil {
		t.Errorf("payments %+v, want nil", got)
	}
	wantErrorContains(t, err, "find payment of checkout c-302: search payment intents: stripe answered 500 api_error: An unknown error occurred")
	if errors.Is(err, payments.ErrInvalidRequest) {
		t.Errorf("error %v is ErrInvalidRequest, want a retryable error", err)
	}
}

func TestCallsEndWhenTheContextIsCancelled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	if _, err := p.FindSucceeded(ctx, "c-303"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("find: error %v, want context.DeadlineExceeded", err)
	}
	_, err := p.Refund(ctx, payments.RefundRequest{PaymentRef: "pi_1", IdempotencyKey: "k"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refund: error %v, want context.DeadlineExceeded", err)
	}
	wantNotRefused(t, err)
}

// TestStripeMockAcceptsOurRequests sends Refund and FindSucceeded to stripe-mock, Stripe's own
// server that validates every request against Stripe's OpenAPI spec (unknown or malformed
// parameters are a 400). It answers from fixtures, so this proves the requests are well-formed,
// not what Stripe would decide; the behaviour is tested against stripetest above.
//
// stripe-mock is pinned in the Makefile and built into .tools/ by `make tools` (the test
// starts it on free loopback ports); STRIPE_MOCK_URL points the test at one already running.
func TestStripeMockAcceptsOurRequests(t *testing.T) {
	url := os.Getenv("STRIPE_MOCK_URL")
	if url == "" {
		url = startStripeMock(t)
	}
	p := payments.NewStripe("sk_test_123", payments.WithStripeAPIURL(url))

	full, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: "pi_123", Currency: "usd", IdempotencyKey: "refund-c-123-pi_123", Reason: "paid after expiry",
	})
	if err != nil {
		t.Fatalf("full refund: %v", err)
	}
	if !strings.HasPrefix(full.ID, "re_") || full.Status != "succeeded" {
		t.Errorf("full refund %+v, want an re_ id and status succeeded", full)
	}

	partial, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: "pi_123", AmountCents: 500, IdempotencyKey: "refund-c-124-pi_123", Reason: "wrong amount",
	})
	if err != nil {
		t.Fatalf("partial refund: %v", err)
	}
	if partial.AmountCents != 500 {
		t.Errorf("partial refund of %d cents, want the 500 sent (stripe-mock echoes it)", partial.AmountCents)
	}

	// The fixture PaymentIntent is neither succeeded nor tagged with this checkout, so nothing
	// is found; what matters is that the search request itself is accepted.
	if _, err := p.FindSucceeded(testContext(t), "c-123"); err != nil {
		t.Fatalf("find: %v", err)
	}
}

// startStripeMock runs .tools/stripe-mock (or STRIPE_MOCK) on free loopback ports until the
// test ends, and returns its HTTP address.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STRIPE_MOCK")
	if bin == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			t.Fatalf("find module root: %v", err)
		}
		bin = filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), ".tools", "stripe-mock")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stripe-mock is not built at %s: run `make tools` (or set STRIPE_MOCK or STRIPE_MOCK_URL)", bin)
	}
	httpAddr, httpsAddr := "127.0.0.1:"+testenv.FreePort(t), "127.0.0.1:"+testenv.FreePort(t)
	cmd := exec.Command(bin, "-http-addr", httpAddr, "-https-addr", httpsAddr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", httpAddr, time.Second)
		if err == nil {
			_ = conn.Close()
			return "http://" + httpAddr
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not listen on %s within 30 s", httpAddr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

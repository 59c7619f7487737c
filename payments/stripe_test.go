package payments_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

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
	require.Len(t, reqs, 1)
	r := reqs[0]
	assert.Equal(t, method, r.Method)
	assert.Equal(t, path, r.Path)
	assert.Equal(t, "Bearer "+f.Key(), r.Header.Get("Authorization"))
	return r
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStripeProviderIsNamedStripe(t *testing.T) {
	var p payments.Provider = payments.NewStripe("sk_test_x")
	assert.Equal(t, "stripe", p.Name())
}

func TestRefundInFullSendsStripeWireFormat(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-123", "succeeded", 199800, "usd")
	p := newProvider(f)

	got, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: pi, Currency: "usd", IdempotencyKey: "refund-c-123-" + pi, Reason: "paid after expiry",
	})
	require.NoError(t, err)
	assert.Equal(t, payments.Refund{ID: "re_fake0001", Status: "succeeded", AmountCents: 199800}, got)

	r := onlyRequest(t, f, http.MethodPost, "/v1/refunds")
	assert.Equal(t, "refund-c-123-"+pi, r.Header.Get("Idempotency-Key"))
	assert.Equal(t, "application/x-www-form-urlencoded", r.Header.Get("Content-Type"))
	assert.NotEmpty(t, r.Header.Get("Stripe-Version"))
	assert.Equal(t, map[string][]string{
		"payment_intent":            {pi},
		"metadata[reason]":          {"paid after expiry"},
		"metadata[idempotency_key]": {"refund-c-123-" + pi},
		"metadata[currency]":        {"usd"},
	}, map[string][]string(r.Form), "no amount: a full refund")

	refunds := f.Refunds()
	require.Len(t, refunds, 1)
	assert.Equal(t, map[string]string{"reason": "paid after expiry", "idempotency_key": "refund-c-123-" + pi, "currency": "usd"}, refunds[0].Metadata)
}

func TestRefundPartialSendsAmount(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-124", "succeeded", 199800, "usd")
	p := newProvider(f)

	got, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 500, IdempotencyKey: "refund-c-124-" + pi})
	require.NoError(t, err)
	assert.Equal(t, int64(500), got.AmountCents)

	reqs := f.Requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, "500", reqs[0].Form.Get("amount"))
	assert.Equal(t, pi, reqs[0].Form.Get("payment_intent"))
	assert.False(t, reqs[0].Form.Has("metadata[reason]"), "no reason given, none sent")
	assert.False(t, reqs[0].Form.Has("currency"), "currency only applies to customer-balance refunds")
}

func TestRefundRepeatedKeyReturnsTheSameRefund(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-125", "succeeded", 5000, "eur")
	p := newProvider(f)
	req := payments.RefundRequest{PaymentRef: pi, AmountCents: 1000, Currency: "eur", IdempotencyKey: "refund-c-125-" + pi, Reason: "wrong amount"}

	first, err := p.Refund(testContext(t), req)
	require.NoError(t, err)
	second, err := p.Refund(testContext(t), req)
	require.NoError(t, err)

	assert.Equal(t, first, second)
	assert.Len(t, f.Refunds(), 1, "a repeated key must not refund twice")
	reqs := f.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key"))
	assert.Equal(t, reqs[0].Form, reqs[1].Form)
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
		require.Error(t, err, "attempt %d", attempt)
		assert.NotErrorIs(t, err, payments.ErrRefundRefused, "attempt %d: a 500 is worth retrying", attempt)
		assert.Contains(t, err.Error(), "refund payment "+pi+": stripe answered 500 api_error: An unknown error occurred")
		var se *stripe.Error
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 500, se.HTTPStatusCode)
	}
	got, err := p.Refund(testContext(t), req)
	require.NoError(t, err)
	assert.Equal(t, payments.Refund{ID: "re_fake0001", Status: "succeeded", AmountCents: 2500}, got)

	// stripe-go does not retry a Stripe error answer itself: one request per call, so Temporal's
	// retry policy is the only loop. All three carried the same key.
	reqs := f.Requests()
	require.Len(t, reqs, 3)
	for _, r := range reqs {
		assert.Equal(t, "refund-c-126-"+pi, r.Header.Get("Idempotency-Key"))
	}
	assert.Len(t, f.Refunds(), 1)
}

func TestRefundAlreadyRefundedIsSuccess(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-127", "succeeded", 4200, "usd")
	p := newProvider(f)
	_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "support-manual-refund"})
	require.NoError(t, err)

	// The saga's own refund comes later with its own key: Stripe answers charge_already_refunded.
	got, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, IdempotencyKey: "refund-c-127-" + pi})
	require.NoError(t, err)
	assert.Equal(t, payments.Refund{Status: "succeeded"}, got, "no new refund: empty ID")
	assert.Len(t, f.Refunds(), 1)
	reqs := f.Requests()
	require.Len(t, reqs, 2)
	assert.Equal(t, "refund-c-127-"+pi, reqs[1].Header.Get("Idempotency-Key"))
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
			require.ErrorIs(t, err, payments.ErrRefundRefused)
			assert.Contains(t, err.Error(), "refund payment "+pi+": refund refused by payment provider: "+tt.message)
			assert.Contains(t, err.Error(), "(request req_fake0001)")
			var se *stripe.Error
			require.ErrorAs(t, err, &se, "the Stripe error stays reachable")
			assert.Empty(t, f.Refunds())
		})
	}
}

func TestRefundKeyReusedWithOtherParametersIsRefused(t *testing.T) {
	f := stripetest.New(t)
	pi := f.AddIntent("c-129", "succeeded", 1000, "usd")
	p := newProvider(f)
	_, err := p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 100, IdempotencyKey: "refund-c-129"})
	require.NoError(t, err)

	_, err = p.Refund(testContext(t), payments.RefundRequest{PaymentRef: pi, AmountCents: 200, IdempotencyKey: "refund-c-129"})
	require.ErrorIs(t, err, payments.ErrRefundRefused)
	assert.Contains(t, err.Error(), "idempotency_error")
	assert.Len(t, f.Refunds(), 1)
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
			require.Error(t, err)
			assert.NotErrorIs(t, err, payments.ErrRefundRefused)
			assert.NotErrorIs(t, err, payments.ErrInvalidRequest)
			assert.Empty(t, f.Refunds())
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
		require.Error(t, err)
		assert.NotErrorIs(t, err, payments.ErrRefundRefused)
		assert.Contains(t, err.Error(), "refund payment pi_1: ")
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
		require.Error(t, err)
		assert.NotErrorIs(t, err, payments.ErrRefundRefused)
		assert.Less(t, time.Since(start), 5*time.Second, "the HTTP timeout must end the call")
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
		require.NoError(t, err)
		assert.Equal(t, int64(700), got.AmountCents)
		require.Equal(t, []string{"refund-c-131-" + pi}, dropped)
		reqs := f.Requests()
		require.Len(t, reqs, 1)
		assert.Equal(t, "refund-c-131-"+pi, reqs[0].Header.Get("Idempotency-Key"))
		assert.Len(t, f.Refunds(), 1)
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
			require.ErrorIs(t, err, payments.ErrInvalidRequest)
			assert.NotErrorIs(t, err, payments.ErrRefundRefused)
			assert.Empty(t, f.Requests())
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
	require.NoError(t, err)
	assert.Equal(t, []payments.Payment{{Ref: pi, CheckoutID: "c-200", AmountCents: 199800, Currency: "usd"}}, got)

	r := onlyRequest(t, f, http.MethodGet, "/v1/payment_intents/search")
	assert.Equal(t, "metadata['checkout_id']:'c-200' AND status:'succeeded'", r.Query.Get("query"))
	assert.Equal(t, "10", r.Query.Get("limit"))
	assert.Empty(t, r.Header.Get("Idempotency-Key"), "a read carries no key")
}

func TestFindSucceededNoneIsNil(t *testing.T) {
	f := stripetest.New(t)
	f.AddIntent("c-300", "canceled", 1000, "usd")
	f.AddIntent("c-3000", "succeeded", 1000, "usd")
	p := newProvider(f)

	got, err := p.FindSucceeded(testContext(t), "c-300")
	require.NoError(t, err)
	assert.Nil(t, got)
	require.Len(t, f.Requests(), 1)
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
	require.NoError(t, err)
	assert.Equal(t, []payments.Payment{{Ref: "pi_old", CheckoutID: "c-301", AmountCents: 1234, Currency: "gbp"}}, got)
}

// Review L8: an earlier payment of the wrong amount (refunded, but still "succeeded" at Stripe)
// must not hide the right one, as it did when the search asked for one result.
func TestFindSucceededReturnsEveryPaymentOfTheCheckout(t *testing.T) {
	f := stripetest.New(t)
	wrong := f.AddIntent("c-400", "succeeded", 100, "usd")
	right := f.AddIntent("c-400", "succeeded", 199800, "usd")
	got, err := newProvider(f).FindSucceeded(testContext(t), "c-400")
	require.NoError(t, err)
	assert.Equal(t, []payments.Payment{
		{Ref: wrong, CheckoutID: "c-400", AmountCents: 100, Currency: "usd"},
		{Ref: right, CheckoutID: "c-400", AmountCents: 199800, Currency: "usd"},
	}, got)
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
			require.ErrorIs(t, err, payments.ErrInvalidRequest)
			assert.Nil(t, got)
			assert.Empty(t, f.Requests(), "nothing may reach Stripe")
		})
	}
	t.Run("longest valid id", func(t *testing.T) {
		f := stripetest.New(t)
		id := strings.Repeat("a", 62) + "._"
		_, err := newProvider(f).FindSucceeded(testContext(t), id)
		require.NoError(t, err)
		require.Len(t, f.Requests(), 1)
	})
}

func TestFindSucceededServerErrorIsReturned(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": map[string]any{"type": "api_error", "message": "An unknown error occurred"}})
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))

	got, err := p.FindSucceeded(testContext(t), "c-302")
	require.Error(t, err)
	assert.Nil(t, got)
	assert.Contains(t, err.Error(), "find payment of checkout c-302: search payment intents: stripe answered 500 api_error: An unknown error occurred")
	assert.NotErrorIs(t, err, payments.ErrInvalidRequest)
}

func TestCallsEndWhenTheContextIsCancelled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	p := payments.NewStripe("sk_test_x", payments.WithStripeAPIURL(srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	_, err := p.FindSucceeded(ctx, "c-303")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = p.Refund(ctx, payments.RefundRequest{PaymentRef: "pi_1", IdempotencyKey: "k"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, payments.ErrRefundRefused)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

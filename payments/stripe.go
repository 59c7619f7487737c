package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// DefaultStripeTimeout bounds each HTTP request to Stripe. Stripe answers refunds and searches in
// well under a second; 10 s leaves room for a slow moment without holding an activity for long.
const DefaultStripeTimeout = 10 * time.Second

// DefaultStripeNetworkRetries is stripe-go's own default (2). stripe-go retries only a request that
// never got an answer (connection refused or reset, timeout) and a 429 lock_timeout, each time
// with the same Idempotency-Key, so a retry cannot refund twice. A Stripe error answer (4xx, 5xx)
// is returned at once. Everything beyond that is Temporal's job: it retries the activity with its
// own backoff, so this number stays small rather than stacking a second retry loop on top.
// Worst case per call: (1 + retries) × timeout + about 1.5 s of backoff, which the activity's
// StartToCloseTimeout must cover (about 35 s with the defaults).
const DefaultStripeNetworkRetries = 2

// Stripe is the Provider on Stripe's API through stripe-go.
type Stripe struct {
	client *stripe.Client
	// httpClient is kept so tests can see the timeout actually configured.
	httpClient *http.Client
}

var _ Provider = (*Stripe)(nil)

// StripeOption configures NewStripe.
type StripeOption func(*stripeConfig)

type stripeConfig struct {
	apiURL         string
	timeout        time.Duration
	networkRetries int64
}

// WithStripeAPIURL sets the API base URL (default https://api.stripe.com), e.g. a local test
// server or stripe-mock at http://127.0.0.1:12111.
func WithStripeAPIURL(url string) StripeOption {
	return func(c *stripeConfig) { c.apiURL = url }
}

// WithStripeTimeout sets the timeout of each HTTP request (default DefaultStripeTimeout). A value
// <= 0 keeps the default: no request to Stripe runs without a timeout.
func WithStripeTimeout(d time.Duration) StripeOption {
	return func(c *stripeConfig) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithStripeNetworkRetries sets how often stripe-go itself retries a request that got no answer
// (default DefaultStripeNetworkRetries; 0 leaves every retry to Temporal). Negative values are
// treated as 0.
func WithStripeNetworkRetries(n int64) StripeOption {
	return func(c *stripeConfig) { c.networkRetries = max(n, 0) }
}

// NewStripe returns the Stripe provider for the secret key (sk_live_..., sk_test_... or rk_...).
func NewStripe(secretKey string, opts ...StripeOption) *Stripe {
	cfg := stripeConfig{timeout: DefaultStripeTimeout, networkRetries: DefaultStripeNetworkRetries}
	for _, opt := range opts {
		opt(&cfg)
	}
	httpClient := &http.Client{Timeout: cfg.timeout}
	backendConfig := &stripe.BackendConfig{
		HTTPClient:        httpClient,
		MaxNetworkRetries: stripe.Int64(cfg.networkRetries),
		// Every error is returned to the caller, who logs it with the checkout; stripe-go's own
		// logger would print the same failure again, unstructured, on stderr.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.apiURL != "" {
		backendConfig.URL = stripe.String(cfg.apiURL)
	}
	backends := &stripe.Backends{
		API: stripe.GetBackendWithConfig(stripe.APIBackend, backendConfig),
		// Only the API backend is used; the others keep Stripe's URLs but get the same
		// timeout, retries and logger.
		Connect:     stripe.GetBackendWithConfig(stripe.ConnectBackend, withoutURL(backendConfig)),
		Uploads:     stripe.GetBackendWithConfig(stripe.UploadsBackend, withoutURL(backendConfig)),
		MeterEvents: stripe.GetBackendWithConfig(stripe.MeterEventsBackend, withoutURL(backendConfig)),
	}
	return &Stripe{
		client:     stripe.NewClient(secretKey, stripe.WithBackends(backends)),
		httpClient: httpClient,
	}
}

func withoutURL(c *stripe.BackendConfig) *stripe.BackendConfig {
	copied := *c
	copied.URL = nil
	return &copied
}

// Name is "stripe".
func (s *Stripe) Name() string { return "stripe" }

// Refund creates a refund of the PaymentIntent r.PaymentRef: POST /v1/refunds with
// payment_intent, amount when r.AmountCents > 0, metadata[reason], metadata[idempotency_key] and
// metadata[currency], and the Idempotency-Key header. Stripe answers a repeated key with the first
// refund, so retries never refund twice. A payment already refunded in full
// (charge_already_refunded) is success with an empty ID; see Refund.ID.
func (s *Stripe) Refund(ctx context.Context, r RefundRequest) (Refund, error) {
	if r.PaymentRef == "" {
		return Refund{}, fmt.Errorf("refund payment: payment ref is empty: %w", ErrInvalidRequest)
	}
	if r.IdempotencyKey == "" {
		// Without a key stripe-go would make up a new one per call, and a retried activity
		// could refund twice.
		return Refund{}, fmt.Errorf("refund payment %s: idempotency key is empty: %w", r.PaymentRef, ErrInvalidRequest)
	}
	if len(r.IdempotencyKey) > 255 {
		return Refund{}, fmt.Errorf("refund payment %s: idempotency key is longer than 255 characters: %w", r.PaymentRef, ErrInvalidRequest)
	}
	if r.AmountCents < 0 {
		return Refund{}, fmt.Errorf("refund payment %s: amount %d is negative: %w", r.PaymentRef, r.AmountCents, ErrInvalidRequest)
	}

	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(r.PaymentRef)}
	if r.AmountCents > 0 {
		params.Amount = stripe.Int64(r.AmountCents)
	}
	params.AddMetadata("idempotency_key", r.IdempotencyKey)
	if r.Reason != "" {
		params.AddMetadata("reason", r.Reason)
	}
	if r.Currency != "" {
		params.AddMetadata("currency", r.Currency)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)

	refund, err := s.client.V1Refunds.Create(ctx, params)
	if err != nil {
		var se *stripe.Error
		if !errors.As(err, &se) {
			// No answer from Stripe (network, timeout, cancelled context): retryable.
			return Refund{}, fmt.Errorf("refund payment %s: %w", r.PaymentRef, err)
		}
		if se.Code == stripe.ErrorCodeChargeAlreadyRefunded {
			// The money is already back with the customer, by this key's earlier refund (whose
			// answer Stripe no longer replays) or another one. Looking it up would cost a call and
			// not change what the saga does next.
			return Refund{Status: RefundSucceeded}, nil
		}
		if refusedForGood(se) {
			return Refund{}, fmt.Errorf("refund payment %s: %w: %w", r.PaymentRef, ErrRefundRefused, stripeError{se})
		}
		return Refund{}, fmt.Errorf("refund payment %s: %w", r.PaymentRef, stripeError{se})
	}
	return Refund{ID: refund.ID, Status: string(refund.Status), AmountCents: refund.Amount}, nil
}

// FindSucceeded searches Stripe's PaymentIntents for metadata.checkout_id = checkoutID and status
// succeeded (GET /v1/payment_intents/search), one page of up to MaxFound, and leaves out those
// refunded in full or in part. Stripe keeps a refunded PaymentIntent at status succeeded with
// its amount_received (the refund is on its charge), so the search expands each one's latest
// charge and reads its amount_refunded. Stripe's search index lags writes by up to about a
// minute, so none for a payment made seconds ago is possible: reconcile after a delay.
func (s *Stripe) FindSucceeded(ctx context.Context, checkoutID string) ([]Payment, error) {
	if !checkoutIDPattern.MatchString(checkoutID) {
		return nil, fmt.Errorf("find payment of checkout %q: checkout id must be 1 to 64 letters, digits, '.', '_' or '-': %w", checkoutID, ErrInvalidRequest)
	}
	params := &stripe.PaymentIntentSearchParams{}
	// The id is checked above, so it cannot leave its quotes.
	params.Query = fmt.Sprintf("metadata['checkout_id']:'%s' AND status:'succeeded'", checkoutID)
	params.Limit = stripe.Int64(MaxFound)
	params.Single = true // one page, one request
	params.AddExpand("data.latest_charge")

	var found []Payment
	for pi, err := range s.client.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			var se *stripe.Error
			if errors.As(err, &se) {
				err = stripeError{se}
			}
			return nil, fmt.Errorf("find payment of checkout %s: search payment intents: %w", checkoutID, err)
		}
		// The query already says this; checked again so a broad answer can never pass
		// another checkout's payment off as this one's.
		if pi.Status != stripe.PaymentIntentStatusSucceeded || pi.Metadata["checkout_id"] != checkoutID {
			continue
		}
		if charge := pi.LatestCharge; charge != nil {
			if charge.Object == "" {
				// Named, not expanded: a refunded payment would look kept. Asked again by the
				// next reconciliation rather than passed off as paying.
				return nil, fmt.Errorf("find payment of checkout %s: payment intent %s: latest charge %s is not expanded", checkoutID, pi.ID, charge.ID)
			}
			if charge.AmountRefunded > 0 {
				continue // given back, in full or in part: not a payment a checkout may keep
			}
		}
		amount := pi.AmountReceived
		if amount == 0 {
			amount = pi.Amount
		}
		found = append(found, Payment{Ref: pi.ID, CheckoutID: checkoutID, AmountCents: amount, Currency: string(pi.Currency)})
	}
	return found, nil
}

// refusedForGood tells a Stripe answer that no retry can change (the charge is disputed, the
// payment intent does not exist, the amount is too large, a key reused with other parameters)
// from one worth retrying (5xx, 429 rate limit or lock timeout, 409 conflict) or one an operator
// must fix (401/403: a bad or restricted key; retried until fixed, like a database outage).
func refusedForGood(se *stripe.Error) bool {
	switch se.Code {
	case stripe.ErrorCodeLockTimeout, stripe.ErrorCodeRateLimit:
		return false
	}
	switch se.HTTPStatusCode {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusNotFound:
	default:
		return false
	}
	switch se.Type {
	case stripe.ErrorTypeCard, stripe.ErrorTypeInvalidRequest, stripe.ErrorTypeIdempotency:
		return true
	}
	return false
}

// stripeError reads a Stripe error answer as a sentence (stripe-go's own Error() is its JSON) and
// keeps it reachable with errors.As(err, **stripe.Error).
type stripeError struct{ err *stripe.Error }

func (e stripeError) Error() string {
	msg := fmt.Sprintf("stripe answered %d %s", e.err.HTTPStatusCode, e.err.Type)
	if e.err.Code != "" {
		msg += " " + string(e.err.Code)
	}
	if e.err.Msg != "" {
		msg += ": " + e.err.Msg
	}
	if e.err.RequestID != "" {
		msg += " (request " + e.err.RequestID + ")"
	}
	return msg
}

func (e stripeError) Unwrap() error { return e.err }

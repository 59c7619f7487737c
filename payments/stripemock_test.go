package payments_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkout-saga/checkout-saga/payments"
)

// TestStripeMockAcceptsOurRequests sends Refund and FindSucceeded to stripe-mock, Stripe's own
// server that validates every request against Stripe's OpenAPI spec (unknown or malformed
// parameters are a 400). It answers from fixtures, so this proves the requests are well-formed,
// not what Stripe would decide; the behaviour is tested against fakeStripe above.
//
// It runs only when STRIPE_MOCK_URL is set (stripe-mock is a separate binary):
//
//	GOBIN=$PWD/.tools go install github.com/stripe/stripe-mock@v0.203.0
//	.tools/stripe-mock -http-addr 127.0.0.1:12111 -https-addr 127.0.0.1:12112 &
//	STRIPE_MOCK_URL=http://127.0.0.1:12111 go test -count=1 -run StripeMock ./payments/
func TestStripeMockAcceptsOurRequests(t *testing.T) {
	url := os.Getenv("STRIPE_MOCK_URL")
	if url == "" {
		t.Skip("STRIPE_MOCK_URL is not set; start stripe-mock and set it to run this test")
	}
	p := payments.NewStripe("sk_test_123", payments.WithStripeAPIURL(url))

	full, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: "pi_123", Currency: "usd", IdempotencyKey: "refund-c-123-pi_123", Reason: "paid after expiry",
	})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(full.ID, "re_"), "refund id %q", full.ID)
	assert.Equal(t, "succeeded", full.Status)

	partial, err := p.Refund(testContext(t), payments.RefundRequest{
		PaymentRef: "pi_123", AmountCents: 500, IdempotencyKey: "refund-c-124-pi_123", Reason: "wrong amount",
	})
	require.NoError(t, err)
	assert.Equal(t, int64(500), partial.AmountCents, "stripe-mock echoes the amount it was sent")

	// The fixture PaymentIntent is neither succeeded nor tagged with this checkout, so nothing
	// is found; what matters is that the search request itself is accepted.
	_, err = p.FindSucceeded(testContext(t), "c-123")
	require.NoError(t, err)
}

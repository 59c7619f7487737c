package payments_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/payments"
)

// TestStripeMockAcceptsOurRequests sends Refund and FindSucceeded to stripe-mock, Stripe's own
// server that validates every request against Stripe's OpenAPI spec (unknown or malformed
// parameters are a 400). It answers from fixtures, so this proves the requests are well-formed,
// not what Stripe would decide; the behaviour is tested against fakeStripe above.
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

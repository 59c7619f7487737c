package payments

import (
	"testing"
	"time"
)

// Every outbound call has a timeout, also when the caller sets none or a nonsensical one.
func TestStripeCallsAlwaysHaveATimeout(t *testing.T) {
	if got := NewStripe("sk_test_x").httpClient.Timeout; got != 10*time.Second {
		t.Fatalf("default timeout = %v, want 10s", got)
	}
	if got := NewStripe("sk_test_x", WithStripeTimeout(0)).httpClient.Timeout; got != DefaultStripeTimeout {
		t.Fatalf("timeout after WithStripeTimeout(0) = %v, want the default", got)
	}
	if got := NewStripe("sk_test_x", WithStripeTimeout(3*time.Second)).httpClient.Timeout; got != 3*time.Second {
		t.Fatalf("timeout = %v, want 3s", got)
	}
}

package api

import (
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

// The public view never carries an internal error: a failed step's text, or the raw error
// support reads in attention, is replaced by a stable code and a fixed sentence.
func TestPublicViewHidesInternalErrors(t *testing.T) {
	s := &Server{}
	raw := "release 2 x PHONE-X: dial tcp 127.0.0.1:6379: connect: connection refused"
	for _, tc := range []struct {
		v        shop.View
		code     string
		wantText string // "" : the saga's own text is kept
	}{
		{shop.View{Status: shop.StatusFailed, Reason: &raw, NeedsAttention: true, Attention: raw}, "checkout_failed", "support has been told"},
		{shop.View{Status: shop.StatusOutOfStock, Reason: new(shop.RejectCustomerLimit)}, "customer_limit", "per-customer limit"},
		{shop.View{Status: shop.StatusOutOfStock, Reason: new(raw)}, "out_of_stock", "could not be held"},
		{shop.View{Status: shop.StatusExpired, Reason: new("no payment before 2026-12-01T10:00:00Z")}, "payment_window_expired", ""},
		{shop.View{Status: shop.StatusCancelled, Reason: new("cancelled by support")}, "cancelled", ""},
	} {
		got := s.present(tc.v)
		if got.ReasonCode == nil || *got.ReasonCode != tc.code || got.Reason == nil {
			t.Errorf("%s: reason_code %v, reason %v; want code %s", tc.v.Status, got.ReasonCode, got.Reason, tc.code)
			continue
		}
		if tc.wantText == "" && *got.Reason != *tc.v.Reason || tc.wantText != "" && !strings.Contains(*got.Reason, tc.wantText) {
			t.Errorf("%s: reason %q; want %q", tc.v.Status, *got.Reason, tc.wantText)
		}
		if strings.Contains(*got.Reason, "dial tcp") || strings.Contains(got.Attention, "dial tcp") {
			t.Errorf("%s: the public view shows the internal error: reason %q attention %q", tc.v.Status, *got.Reason, got.Attention)
		}
	}
}

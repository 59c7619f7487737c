package api

import (
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
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

// A checkout Postgres still has open, whose saga closed without an end, may still hold its
// units until it is settled: its view and the answer to a retried POST never say that
// nothing is held. Once settled, its record is failed like any other.
func TestAnUnsettledCheckoutNeverReadsNothingIsHeld(t *testing.T) {
	s := &Server{}
	v := shop.ViewFromRecord(shop.CheckoutRecord{CheckoutID: "c-1", Status: shop.RecordOpen})
	got := s.present(v)
	if got.Status != shop.StatusFailed || got.ReasonCode == nil || *got.ReasonCode != "checkout_failed" || got.Reason == nil {
		t.Fatalf("view of an open record whose saga is gone = %+v, want failed with code checkout_failed and a reason", got)
	}
	if strings.Contains(*got.Reason, "nothing is held") {
		t.Errorf("view of an open record whose saga is gone reads %q", *got.Reason)
	}
	err := s.answerReservation(nil, workflows.ReservationResult{View: v}, "", doorFacts{})
	if p, ok := err.(*Problem); !ok || p.Code != "checkout_failed" || strings.Contains(p.Detail, "nothing is held") {
		t.Errorf("a retried POST of that checkout answers %v", err)
	}
}

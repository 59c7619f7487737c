package shop_test

import (
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

// The one id rule: 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'; nothing that could break a
// Redis key's {sku} hash tag or shape, and not "." or "..", which clients normalise out of a
// path (GET /v1/checkouts/.. is GET /v1/), so a cart of that id could never be read.
func TestValidIDIsTheContractsIDSyntax(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{"cart-1", true}, {"A.b_C-9", true}, {strings.Repeat("x", 64), true},
		{"", false}, {strings.Repeat("x", 65), false}, {"a{b}", false}, {"a{b", false}, {"a}b", false}, {"a:b", false}, {"a b", false}, {"a*b", false}, {"é", false}, {"~change", false},
		{".", false}, {"..", false}, {"...", true}, {".a", true}, {"a..b", true},
	} {
		if got := shop.ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// A state never moves backwards: only the end states are final, and they rank above every
// state before them.
func TestEveryEndStateIsFinalAndRanksLast(t *testing.T) {
	open := []shop.Status{shop.StatusReserving, shop.StatusAwaitingPayment, shop.StatusConfirming}
	ends := []shop.Status{shop.StatusConfirmed, shop.StatusOutOfStock, shop.StatusExpired, shop.StatusCancelled, shop.StatusPaymentFailed, shop.StatusFailed}
	for i, s := range open {
		if s.Final() || s.Rank() != i {
			t.Errorf("%s: final %v, rank %d; want open at rank %d", s, s.Final(), s.Rank(), i)
		}
	}
	for _, s := range ends {
		if !s.Final() || s.Rank() <= open[len(open)-1].Rank() {
			t.Errorf("%s: final %v, rank %d; want final, above every open state", s, s.Final(), s.Rank())
		}
	}
}

// A record whose saga is gone without an end reads as failed and flagged, never as open.
func TestViewFromAnOpenRecordIsFailedAndFlagged(t *testing.T) {
	v := shop.ViewFromRecord(shop.CheckoutRecord{CheckoutID: "c-1", Status: shop.RecordOpen})
	if v.Status != shop.StatusFailed || !v.NeedsAttention || v.Reason == nil || v.WorkflowID != shop.WorkflowID("c-1") {
		t.Errorf("view of an open record = %+v, want failed, needs attention, with a reason and the saga's id", v)
	}
	orderID := shop.OrderID("c-2")
	v = shop.ViewFromRecord(shop.CheckoutRecord{CheckoutID: "c-2", Status: string(shop.StatusConfirmed), OrderID: orderID})
	if v.Status != shop.StatusConfirmed || v.NeedsAttention || v.OrderID == nil || *v.OrderID != orderID || v.Reason != nil {
		t.Errorf("view of a confirmed record = %+v, want confirmed with order %s", v, orderID)
	}
}

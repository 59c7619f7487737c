package activities

import (
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/store"
)

// The grace protects only a saga that may still act: an ended checkout's hold is ended at
// once when its saga is closed, after grace otherwise, and a live checkout's hold is never
// touched. Temporal is asked only when the answer matters.
func TestFateOfHoldWaitsOnlyForASagaThatMayStillAct(t *testing.T) {
	now := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	grace := 5 * time.Minute
	endedAgo := func(d time.Duration) store.CheckoutEnd {
		at := now.Add(-d)
		return store.CheckoutEnd{Status: "failed", EndedAt: &at}
	}
	for _, tc := range []struct {
		name       string
		end        store.CheckoutEnd
		known      bool
		sagaClosed bool
		want       holdFate
		asks       bool // whether Temporal is asked
	}{
		{"unknown checkout", store.CheckoutEnd{}, false, false, holdUnknown, false},
		{"live checkout, saga running", store.CheckoutEnd{Status: "awaiting_payment"}, true, false, holdLeft, false},
		{"live checkout, saga closed (endAbandoned's)", store.CheckoutEnd{Status: "awaiting_payment"}, true, true, holdLeft, false},
		{"just ended, saga running", endedAgo(time.Second), true, false, holdLeft, true},
		{"just ended, saga closed", endedAgo(time.Second), true, true, holdEnd, true},
		{"ended past grace, saga running", endedAgo(grace), true, false, holdEnd, false},
		{"ended past grace, saga closed", endedAgo(time.Hour), true, true, holdEnd, false},
	} {
		asked := false
		got := fateOfHold(tc.end, tc.known, now, grace, func() bool { asked = true; return tc.sagaClosed })
		if got != tc.want || asked != tc.asks {
			t.Errorf("%s: fate %d (asked Temporal: %v), want %d (asked: %v)", tc.name, got, asked, tc.want, tc.asks)
		}
	}
}

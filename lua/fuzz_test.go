package lua

import (
	"errors"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

// FuzzReserveRelease throws arbitrary ids and quantities at the wrappers on a real Redis.
// Whatever the input: no panic, bad arguments are refused before Redis with
// ErrInvalidArgument, and the SKU's counters keep available + held == on_hand.
// The seed corpus runs in every `go test`; `go test -fuzz FuzzReserveRelease ./lua/` explores.
func FuzzReserveRelease(f *testing.F) {
	f.Add("c-1", int64(1), true)
	f.Add("c-1", int64(2), false)
	f.Add("", int64(1), true)
	f.Add("c-1", int64(0), true)
	f.Add("c-1", int64(-5), true)
	f.Add("c-1", int64(1_000_001), true)
	f.Add("c-1", int64(9_223_372_036_854_775_807), true)
	f.Add(strings.Repeat("x", 65), int64(1), true)
	f.Add("c}{1", int64(1), true)
	f.Add("c 1", int64(1), true)
	f.Add("c:1", int64(1), false)
	f.Add("ç-1", int64(1), true)
	f.Add("c-1\x00", int64(1), true)

	s, rdb, sku := stocked(f, 50, 5)
	const onHand = 50
	f.Fuzz(func(t *testing.T, checkoutID string, quantity int64, release bool) {
		ctx := t.Context()
		_, err := s.Reserve(ctx, sku, checkoutID, quantity)
		valid := shop.ValidID(checkoutID) && quantity >= 1 && quantity <= maxQuantity
		if !valid && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("reserve(%q, %d): %v; want ErrInvalidArgument", checkoutID, quantity, err)
		}
		if valid && err != nil && !errors.Is(err, ErrOverLimit) && !errors.Is(err, ErrOutOfStock) && !errors.Is(err, ErrHoldEnded) {
			t.Fatalf("reserve(%q, %d): unexpected %v", checkoutID, quantity, err)
		}
		if release {
			if _, err := s.Release(ctx, sku, checkoutID); err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("release(%q): %v", checkoutID, err)
			}
		}
		l, err := s.Level(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if l.Available < 0 || l.Available+l.Held != onHand {
			t.Fatalf("after reserve(%q, %d): available %d + held %d != %d", checkoutID, quantity, l.Available, l.Held, onHand)
		}
		if valid {
			rdb.HDel(ctx, HoldEndsKey(sku), checkoutID)
		}
	})
}

// TestWrongKeyTypeIsAnError: a key of the wrong type (another program wrote it) is a
// returned error that matches no refusal, never a panic or a silent success.
func TestWrongKeyTypeIsAnError(t *testing.T) {
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	s := New(rdb)
	ctx := t.Context()
	rdb.Set(ctx, StockKey(sku), "not a hash", 0)
	rdb.Set(ctx, HoldsKey(sku), "not a hash either", 0)
	t.Cleanup(func() { rdb.Del(ctx, HoldsKey(sku), HoldEndsKey(sku)) })
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"reserve", func() error { _, err := s.Reserve(ctx, sku, "c-1", 1); return err }},
		{"set stock", func() error { _, err := s.SetStock(ctx, sku, 5, 1); return err }},
		{"level", func() error { _, err := s.Level(ctx, sku); return err }},
		{"release", func() error { _, err := s.Release(ctx, sku, "c-1"); return err }},
		{"commit", func() error { _, err := s.Commit(ctx, sku, "c-1"); return err }},
	} {
		name, err := c.name, c.call()
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%s on a string key: %v; want a WRONGTYPE error", name, err)
		}
		for _, refusal := range []error{ErrOutOfStock, ErrNotStocked, ErrInvalidArgument, ErrHoldEnded} {
			if errors.Is(err, refusal) {
				t.Errorf("%s: %v reads as a refusal (%v); Temporal would not retry it", name, err, refusal)
			}
		}
	}
}

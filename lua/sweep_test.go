package lua

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSweepDeletesOnlyMarkersPastTheirTime: Redis 7.0 has no per-field TTL, so the sweep
// deletes hold-end markers whose time is up, and keeps fresh markers, "rebuilt" placeholders'
// markers and the field that keeps the hash in existence.
func TestSweepDeletesOnlyMarkersPastTheirTime(t *testing.T) {
	s, rdb, sku := stocked(t, 10, 5)
	ctx := t.Context()
	if _, err := s.Release(ctx, sku, "c-fresh"); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute).Unix()
	rdb.HSet(ctx, HoldEndsKey(sku), "c-old-1", fmt.Sprintf("released:%d", past),
		"c-old-2", fmt.Sprintf("committed:%d", past), "c-rebuilt", "rebuilt")
	n, err := s.SweepHoldEnds(ctx, sku)
	if err != nil || n != 2 {
		t.Fatalf("sweep = %d, %v; want the 2 old markers", n, err)
	}
	left, err := rdb.HKeys(ctx, HoldEndsKey(sku)).Result()
	if err != nil || fmt.Sprint(slices.Sorted(slices.Values(left))) != "[:layout c-fresh c-rebuilt]" {
		t.Fatalf("markers left = %v, %v", left, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-fresh", 1); err == nil {
		t.Errorf("a late reserve of c-fresh held units after the sweep")
	}
	if n, err := s.SweepHoldEnds(ctx, sku); err != nil || n != 0 {
		t.Errorf("second sweep = %d, %v; want 0", n, err)
	}
}

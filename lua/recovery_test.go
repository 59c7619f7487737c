package lua

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// lostSKU is a SKU stocked with onHand units that Redis then lost entirely (its stock hash
// and holds), as after a restart without persistence; s has seen its gen.
func lostSKU(t *testing.T, onHand, maxPerOrder int64) (*Stock, *redis.Client, string) {
	t.Helper()
	s, rdb, sku := stocked(t, onHand, maxPerOrder)
	rdb.Del(t.Context(), StockKey(sku), HoldsKey(sku))
	return s, rdb, sku
}

func TestRebuildAfterRedisLostTheSKU(t *testing.T) {
	s, rdb, sku := reserved(t, 10, 5, "c-a", 3)
	ctx := t.Context()
	// Redis loses everything about the SKU, as after a restart without persistence.
	rdb.Del(ctx, StockKey(sku), HoldsKey(sku))
	if _, err := s.Reserve(ctx, sku, "c-new", 1); err == nil {
		t.Fatal("reserve on a lost SKU succeeded; it must refuse until the SKU is rebuilt")
	}

	// Postgres says: on_hand 10, open checkouts c-a (3) and c-b (2, still reserving).
	l, rebuilt, err := s.Rebuild(ctx, sku, 10, 5, []Hold{{"c-a", 3}, {"c-b", 2}}, nil, 0)
	if err != nil || !rebuilt || l.Available != 5 || l.Held != 5 {
		t.Fatalf("rebuild: %+v rebuilt=%v err=%v; want available 5, held 5", l, rebuilt, err)
	}
	assertLevel(t, s, rdb, sku, 5, 5, 2)
	// A second rebuild (another worker) changes nothing.
	if _, rebuilt, err := s.Rebuild(ctx, sku, 10, 5, nil, nil, 0); err != nil || rebuilt {
		t.Errorf("second rebuild: rebuilt=%v err=%v; want a no-op", rebuilt, err)
	}
	// c-b was still reserving: its reserve gives the placeholder back and holds for real;
	// c-a's release returns its units.
	if r, err := s.Reserve(ctx, sku, "c-b", 2); err != nil || r.AlreadyHeld {
		t.Errorf("reserve of a rebuilt hold: %+v, %v; want a new hold", r, err)
	}
	if n, err := s.Release(ctx, sku, "c-a"); err != nil || n != 3 {
		t.Errorf("release of a rebuilt hold: %d, %v; want 3", n, err)
	}
	assertLevel(t, s, rdb, sku, 8, 2, 1)
}

func TestRebuildNeverOversells(t *testing.T) {
	s, rdb, sku := lostSKU(t, 4, 5)
	ctx := t.Context()
	// More open checkouts than units (some were going to be refused): available goes
	// negative, so available + held stays on_hand, and no new hold can be taken.
	l, _, err := s.Rebuild(ctx, sku, 4, 5, []Hold{{"c-1", 3}, {"c-2", 3}}, nil, 0)
	if err != nil || l.Available != -2 || l.Held != 6 {
		t.Fatalf("rebuild: %+v, %v; want available -2, held 6", l, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-3", 1); err == nil {
		t.Error("a reserve succeeded with nothing available")
	}
	// Both were still reserving: each reserve is judged on what is really left, so one is
	// held and the other refused; the placeholders never let both through.
	_, err1 := s.Reserve(ctx, sku, "c-1", 3)
	_, err2 := s.Reserve(ctx, sku, "c-2", 3)
	if (err1 == nil) == (err2 == nil) {
		t.Errorf("reserves after the rebuild: %v, %v; want exactly one held (4 units, 3 each)", err1, err2)
	}
	assertLevel(t, s, rdb, sku, 1, 3, 1)
}

func TestRebuildSkipsReleasedCheckouts(t *testing.T) {
	s, rdb, sku := lostSKU(t, 10, 5)
	ctx := t.Context()
	// c-a's release ran against the empty Redis (leaving its tombstone) before it recorded
	// its end in Postgres: the rebuild must not give it a hold nobody would release. (A
	// worker that never saw the SKU's gen; one that did would rebuild first, see gens.)
	if _, err := New(rdb).Release(ctx, sku, "c-a"); err != nil {
		t.Fatal(err)
	}
	if l, _, err := s.Rebuild(ctx, sku, 10, 5, []Hold{{"c-a", 3}}, nil, 0); err != nil || l.Available != 10 || l.Held != 0 {
		t.Fatalf("rebuild: %+v, %v; want available 10, held 0", l, err)
	}
}

func TestReconcileRepairsDrift(t *testing.T) {
	s, rdb, sku := reserved(t, 10, 5, "c-a", 2)
	ctx := t.Context()
	// Drift upwards (would oversell): available says 20.
	rdb.HSet(ctx, StockKey(sku), "available", 20)
	r, err := s.Reconcile(ctx, sku, 10, []Hold{{"c-a", 2}}, nil, 0)
	if err != nil || !r.Stocked || r.Before != 20 || r.After != 8 || r.Restored != 0 || r.RolledBack {
		t.Errorf("reconcile: %+v, %v; want 20 -> 8, nothing restored", r, err)
	}
	assertLevel(t, s, rdb, sku, 8, 2, 1)
	// A confirmed order took 2 from on_hand in Postgres before its hold was committed:
	// the repair undersells for a moment (6), never oversells.
	if r, _ := s.Reconcile(ctx, sku, 8, nil, nil, 0); r.After != 6 {
		t.Errorf("reconcile before commit: available %d, want 6", r.After)
	}
	// A lost SKU is not reconciled (a reserve rebuilds it).
	rdb.Del(ctx, StockKey(sku))
	if r, err := s.Reconcile(ctx, sku, 8, nil, nil, 0); err != nil || r.Stocked {
		t.Errorf("reconcile of a lost SKU: %+v, %v; want a no-op", r, err)
	}
}

// Reconcile must keep rebuild's negative available. Rebuild 1 unit with A
// really holding it and R still reserving (a placeholder each: available -1); a reconcile
// that clamps -1 to 0 lets R's reserve give its placeholder back onto 0 and hold: two holds
// on one unit.
func TestReconcileKeepsRebuildPlaceholders(t *testing.T) {
	s, rdb, sku := lostSKU(t, 1, 1)
	ctx := t.Context()
	if l, _, err := s.Rebuild(ctx, sku, 1, 1, []Hold{{"c-a", 1}, {"c-r", 1}}, nil, 0); err != nil || l.Available != -1 {
		t.Fatalf("rebuild: %+v, %v; want available -1", l, err)
	}
	if r, err := s.Reconcile(ctx, sku, 1, []Hold{{"c-a", 1}, {"c-r", 1}}, nil, 0); err != nil || r.After != -1 {
		t.Fatalf("reconcile: available after %d, %v; want -1 (on_hand 1 - held 2)", r.After, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-r", 1); !errors.Is(err, ErrOutOfStock) {
		t.Fatalf("reserve of the still-reserving checkout after reconcile: %v; want out of stock (c-a holds the one unit)", err)
	}
	assertLevel(t, s, rdb, sku, 0, 1, 1)
}

package lua

import (
	"errors"
	"testing"
)

// Redis lost a live hold (a failover to a lagging replica). The
// reconciler must count every open checkout as holding and restore the hold, not publish its
// unit as available.
func TestReconcileRestoresLostHolds(t *testing.T) {
	s, rdb, sku := reserved(t, 1, 1, "c-a", 1)
	ctx := t.Context()
	rdb.HDel(ctx, HoldsKey(sku), "c-a") // the write the failover lost
	rdb.HSet(ctx, StockKey(sku), "available", 1, "held", 0)
	r, err := s.Reconcile(ctx, sku, 1, []Hold{{"c-a", 1}}, nil, 0)
	if err != nil || r.After != 0 || r.Restored != 1 {
		t.Fatalf("reconcile: %+v, %v; want available 0 with c-a's hold restored", r, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-b", 1); !errors.Is(err, ErrOutOfStock) {
		t.Fatalf("reserve of another cart after reconcile: %v; want out of stock", err)
	}
	// c-a pays: its restored hold commits like any other.
	if n, err := s.Commit(ctx, sku, "c-a"); err != nil || n != 1 {
		t.Fatalf("commit of the restored hold: %d, %v", n, err)
	}
	assertLevel(t, s, rdb, sku, 0, 0, 0)
}

// A Redis that went back in time (restored from an older copy of its keys) is refused by
// every hold script of a process that saw a later gen, until a reconcile from Postgres.
func TestRolledBackRedisRefusesUntilReconciled(t *testing.T) {
	s, rdb, sku := stocked(t, 3, 1)
	ctx := t.Context()
	keys := []string{StockKey(sku), HoldsKey(sku)}
	dumps := map[string]string{}
	for _, k := range keys {
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil && k == StockKey(sku) {
			t.Fatal(err)
		}
		dumps[k] = d
	}
	for _, c := range []string{"c-1", "c-2", "c-3"} {
		if _, err := s.Reserve(ctx, sku, c, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Back to the copy from before the three holds.
	for _, k := range keys {
		rdb.Del(ctx, k)
		if dumps[k] != "" {
			if err := rdb.Restore(ctx, k, 0, dumps[k]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, op := range map[string]func() error{
		"reserve": func() error { _, err := s.Reserve(ctx, sku, "c-4", 1); return err },
		"release": func() error { _, err := s.Release(ctx, sku, "c-1"); return err },
		"commit":  func() error { _, err := s.Commit(ctx, sku, "c-2"); return err },
		"forfeit": func() error { _, err := s.Forfeit(ctx, sku, "c-3"); return err },
	} {
		var rb *RolledBackError
		if err := op(); !errors.As(err, &rb) || !errors.Is(err, ErrRolledBack) {
			t.Errorf("%s on a rolled-back redis: %v; want ErrRolledBack", name, err)
		}
	}
	assertLevel(t, s, rdb, sku, 3, 0, 0)

	r, err := s.Reconcile(ctx, sku, 3, []Hold{{"c-1", 1}, {"c-2", 1}, {"c-3", 1}}, nil, 0)
	if err != nil || !r.RolledBack || r.Restored != 3 || r.After != 0 {
		t.Fatalf("reconcile: %+v, %v; want rolled back detected, 3 holds restored, available 0", r, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-4", 1); !errors.Is(err, ErrOutOfStock) {
		t.Errorf("reserve after the resync: %v; want out of stock (3 units, 3 open checkouts)", err)
	}
}

// A full loss after this process saw the SKU: release refuses until the rebuild, so the
// rebuild's placeholder is what the release returns.
func TestReleaseAfterFullLossWaitsForRebuild(t *testing.T) {
	s, rdb, sku := reserved(t, 2, 2, "c-1", 2)
	ctx := t.Context()
	rdb.Del(ctx, StockKey(sku), HoldsKey(sku))
	if _, err := s.Release(ctx, sku, "c-1"); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("release on an empty redis: %v; want ErrRolledBack", err)
	}
	if _, rebuilt, err := s.Rebuild(ctx, sku, 2, 2, []Hold{{"c-1", 2}}, nil, 0); err != nil || !rebuilt {
		t.Fatalf("rebuild: %v %v", rebuilt, err)
	}
	if n, err := s.Release(ctx, sku, "c-1"); err != nil || n != 2 {
		t.Fatalf("release after rebuild: %d, %v; want 2", n, err)
	}
	assertLevel(t, s, rdb, sku, 2, 0, 0)
}

func TestForfeitEndsTheHoldWithoutReturningUnits(t *testing.T) {
	s, rdb, sku := stocked(t, 2, 1)
	ctx := t.Context()
	for _, c := range []string{"c-1", "c-2"} {
		if _, err := s.Reserve(ctx, sku, c, 1); err != nil {
			t.Fatal(err)
		}
	}
	// c-2's order was refused: Postgres had one unit fewer than Redis thought.
	if n, err := s.Forfeit(ctx, sku, "c-2"); err != nil || n != 1 {
		t.Fatalf("forfeit: %d, %v; want 1", n, err)
	}
	assertLevel(t, s, rdb, sku, 0, 1, 1)
	if n, err := s.Forfeit(ctx, sku, "c-2"); err != nil || n != 0 {
		t.Errorf("repeated forfeit: %d, %v; want a no-op", n, err)
	}
	if n, err := s.Release(ctx, sku, "c-2"); err != nil || n != 0 {
		t.Errorf("release after forfeit: %d, %v; want a no-op", n, err)
	}
	if _, err := s.Commit(ctx, sku, "c-2"); !errors.Is(err, ErrHoldReleased) {
		t.Errorf("commit after forfeit: %v; want ErrHoldReleased", err)
	}
	if _, err := s.Reserve(ctx, sku, "c-2", 1); !errors.Is(err, ErrHoldEnded) {
		t.Errorf("reserve after forfeit: %v; want ErrHoldEnded", err)
	}
	if _, err := s.Commit(ctx, sku, "c-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forfeit(ctx, sku, "c-1"); !errors.Is(err, ErrHoldCommitted) {
		t.Errorf("forfeit after commit: %v; want ErrHoldCommitted", err)
	}
	assertLevel(t, s, rdb, sku, 0, 0, 0)
}

func TestStageChangeHoldsAnOperatorsChangeUntilPostgresHasIt(t *testing.T) {
	s, rdb, sku := reserved(t, 10, 2, "c-1", 2)
	ctx := t.Context()
	// A decrease beyond the units not held is refused and changes nothing.
	var short *InsufficientStockError
	if _, err := s.StageChange(ctx, sku, "dchg-1", -9, 2); !errors.As(err, &short) || short.Available != 8 {
		t.Fatalf("stage -9 with 8 not held: %v; want *InsufficientStockError{Available: 8}", err)
	}
	assertLevel(t, s, rdb, sku, 8, 2, 1)

	// A decrease leaves available at once; committing it after Postgres took the units.
	if n, err := s.StageChange(ctx, sku, "dchg-2", -3, 2); err != nil || n != 3 {
		t.Fatalf("stage -3: %d, %v", n, err)
	}
	if n, err := s.StageChange(ctx, sku, "dchg-2", -3, 2); err != nil || n != 3 {
		t.Errorf("repeated stage: %d, %v; want the same hold", n, err)
	}
	assertLevel(t, s, rdb, sku, 5, 5, 2)
	if _, err := s.Commit(ctx, sku, ChangeHoldID("dchg-2")); err != nil {
		t.Fatal(err)
	}
	assertLevel(t, s, rdb, sku, 5, 2, 1) // on_hand 7 = 5 + 2

	// An increase is held until Postgres has the units, then released into available.
	if _, err := s.StageChange(ctx, sku, "ichg-3", 4, 3); err != nil {
		t.Fatal(err)
	}
	assertLevel(t, s, rdb, sku, 5, 6, 2)
	if _, err := s.Release(ctx, sku, ChangeHoldID("ichg-3")); err != nil {
		t.Fatal(err)
	}
	assertLevel(t, s, rdb, sku, 9, 2, 1) // on_hand 11
	if l, _ := s.Level(ctx, sku); l.MaxPerOrder != 3 {
		t.Errorf("max_per_order = %d, want 3", l.MaxPerOrder)
	}

	// Postgres refused: an increase is forfeited, a decrease released, both back to before.
	if _, err := s.StageChange(ctx, sku, "ichg-4", 5, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forfeit(ctx, sku, ChangeHoldID("ichg-4")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StageChange(ctx, sku, "dchg-5", -5, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, sku, ChangeHoldID("dchg-5")); err != nil {
		t.Fatal(err)
	}
	assertLevel(t, s, rdb, sku, 9, 2, 1)

	// A change hold is not a checkout: reserve refuses its id before Redis.
	if _, err := s.Reserve(ctx, sku, ChangeHoldID("chg-6"), 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("reserve for a change hold id: %v; want ErrInvalidArgument", err)
	}
	rdb.Del(ctx, StockKey(sku))
	if _, err := New(rdb).StageChange(ctx, sku, "ichg-7", 1, 3); !errors.Is(err, ErrNotStocked) {
		t.Errorf("stage on a lost sku: %v; want ErrNotStocked", err)
	}
}

// TestReconcileReleasesTheHoldOfACheckoutThatEndedUnsold: a failover lost a checkout's
// release, so Redis still holds for a checkout Postgres ended without a sale. The resync
// passes it as UnsoldHoldID: its hold ends as released, and its units are available again.
func TestReconcileReleasesTheHoldOfACheckoutThatEndedUnsold(t *testing.T) {
	s, _, sku := reserved(t, 10, 5, "c-cancelled", 2)
	ctx := t.Context()
	r, err := s.Reconcile(ctx, sku, 10, nil, []string{UnsoldHoldID("c-cancelled")}, 0)
	if err != nil || r.After != 10 {
		t.Fatalf("reconcile = %+v, %v; want 10 available", r, err)
	}
	if outcome, _, _ := s.HoldEnd(ctx, sku, "c-cancelled"); outcome != "released" {
		t.Errorf("marker = %q, want released", outcome)
	}
	if n, err := s.Release(ctx, sku, "c-cancelled"); err != nil || n != 0 {
		t.Errorf("the saga's own release afterwards = %d, %v; want a no-op", n, err)
	}
	if l, _ := s.Level(ctx, sku); l.Available != 10 || l.Held != 0 {
		t.Errorf("level = %+v, want 10 available, 0 held", l)
	}
}

package lua

import (
	"errors"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// restartedSKU stocks a SKU of onHand units (one per order) on a Redis of the test's own,
// snapshots it, lets before hold one unit each through Stock s, and restarts Redis from the
// snapshot: the holds are gone and their units look available, as after a host reboot with
// Redis's default persistence.
func restartedSKU(t *testing.T, onHand int64, before ...string) (*testenv.RedisServer, *Stock, string) {
	t.Helper()
	srv := testenv.StartRedisServer(t)
	s := New(srv.Client())
	sku := "RST-" + testenv.RandomID("")
	ctx := t.Context()
	if _, err := s.SetStock(ctx, sku, onHand, 1); err != nil {
		t.Fatal(err)
	}
	srv.Snapshot()
	for _, c := range before {
		if _, err := s.Reserve(ctx, sku, c, 1); err != nil {
			t.Fatalf("reserve of %s before the restart: %v", c, err)
		}
	}
	srv.Restart()
	l, err := s.Level(ctx, sku)
	if err != nil || l.Held != 0 || l.Available != onHand {
		t.Fatalf("level after the restart = %+v, %v; want the holds lost", l, err)
	}
	return srv, s, sku
}

// A worker that starts after Redis came back from an older snapshot has seen no gen at
// all; its first hold must still be refused until the SKU is resynced from Postgres, which
// knows c-a's checkout is open.
func TestARestartFromAnOlderSnapshotIsCaughtByAProcessStartedAfterIt(t *testing.T) {
	srv, _, sku := restartedSKU(t, 2, "c-a")
	ctx := t.Context()
	fresh := New(srv.Client()) // the restarted worker
	if _, err := fresh.Reserve(ctx, sku, "c-b", 1); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("first reserve after the restart: %v; want ErrRolledBack", err)
	}
	for _, op := range []func() error{
		func() error { _, err := fresh.Release(ctx, sku, "c-a"); return err },
		func() error { _, err := fresh.Commit(ctx, sku, "c-a"); return err },
		func() error { _, err := fresh.StageChange(ctx, sku, "dchg-1", -1, 1); return err },
	} {
		if err := op(); !errors.Is(err, ErrRolledBack) {
			t.Fatalf("an end or change of a hold after the restart: %v; want ErrRolledBack", err)
		}
	}
	r, err := fresh.Reconcile(ctx, sku, 2, []Hold{{"c-a", 1}}, nil, 0)
	if err != nil || r.Restored != 1 || !r.OtherNode {
		t.Fatalf("reconcile = %+v, %v; want c-a's hold restored, the restart noticed", r, err)
	}
	if _, err := fresh.Reserve(ctx, sku, "c-b", 1); err != nil {
		t.Fatalf("reserve after the resync: %v", err)
	}
	if _, err := fresh.Reserve(ctx, sku, "c-c", 1); !errors.Is(err, ErrOutOfStock) {
		t.Fatalf("a third buyer of two units: %v; want out of stock", err)
	}
}

// Two workers: the one that wrote the lost hold and one that saw the SKU only before it.
// The second's gen check passes on the restarted Redis, and its write would lift the gen
// over the rollback for the first one too; the node check stops it first.
func TestARestartIsCaughtByAWorkerThatNeverSawTheLostWrites(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	ctx := t.Context()
	w1, w2 := New(srv.Client()), New(srv.Client())
	sku := "RST2-" + testenv.RandomID("")
	if _, err := w1.SetStock(ctx, sku, 2, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Reserve(ctx, sku, "c-early", 1); err != nil { // w2 sees the SKU's gen
		t.Fatal(err)
	}
	srv.Snapshot()
	if _, err := w1.Reserve(ctx, sku, "c-lost", 1); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if _, err := w2.Reserve(ctx, sku, "c-late", 1); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("reserve by the worker that never saw the lost hold: %v; want ErrRolledBack", err)
	}
	if _, err := w1.Reserve(ctx, sku, "c-late", 1); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("reserve by the worker that wrote it: %v; want ErrRolledBack", err)
	}
	if _, err := w2.Reconcile(ctx, sku, 2, []Hold{{"c-early", 1}, {"c-lost", 1}}, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Reserve(ctx, sku, "c-late", 1); !errors.Is(err, ErrOutOfStock) {
		t.Fatalf("reserve after the resync: %v; want out of stock (both units held)", err)
	}
}

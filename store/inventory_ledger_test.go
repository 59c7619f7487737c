package store_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// The inventory ledger refuses UPDATE and DELETE (migration trigger): corrections are new rows.
func TestLedgerIsAppendOnly(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	sku := testenv.RandomID("L-")
	testenv.PutSKU(t, pool, sku, 5, 100, "usd")
	var id int64
	if err := pool.QueryRow(t.Context(), `SELECT id FROM inventory_ledger WHERE sku = $1`, sku).Scan(&id); err != nil {
		t.Fatalf("read ledger row: %v", err)
	}

	for _, tt := range []struct{ op, sql string }{
		{"UPDATE", `UPDATE inventory_ledger SET delta_on_hand = 500 WHERE id = $1`},
		{"DELETE", `DELETE FROM inventory_ledger WHERE id = $1`},
	} {
		_, err := pool.Exec(t.Context(), tt.sql, id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("%s on the ledger: err = %v, want a Postgres error", tt.op, err)
		}
		if want := "inventory_ledger is append-only: " + tt.op + " refused"; pgErr.Message != want {
			t.Errorf("%s on the ledger: %q, want %q", tt.op, pgErr.Message, want)
		}
	}
	if got := testenv.ReadSKU(t, pool, sku); got.LedgerRows != 1 || got.LedgerOnHand != 5 {
		t.Errorf("ledger after refused UPDATE and DELETE: %+v, want the one row with delta 5", got)
	}
}

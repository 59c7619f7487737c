package testenv

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PutSKU writes a SKU to Postgres only (max_per_order 5), with the ledger row an operator's
// change writes, so sum(delta_on_hand) == on_hand holds from the start. The store,
// inventory and activities tests share it.
func PutSKU(t testing.TB, pool *pgxpool.Pool, sku string, onHand, priceCents int64, currency string) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var old int64
		_ = tx.QueryRow(t.Context(), `SELECT on_hand FROM skus WHERE sku = $1`, sku).Scan(&old)
		if _, err := tx.Exec(t.Context(), `
			INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ($1, $2, $3, $4, 5)
			ON CONFLICT (sku) DO UPDATE SET on_hand = $2, price_cents = $3, currency = $4`,
			sku, onHand, priceCents, currency); err != nil {
			return err
		}
		if onHand == old {
			return nil
		}
		_, err := tx.Exec(t.Context(), `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ($1, $2, 0, 'stock set by operator')`, sku, onHand-old)
		return err
	})
	if err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
}

// SKURow is a SKU's Postgres row beside its ledger's rows and sums.
type SKURow struct {
	OnHand, Sold             int64
	LedgerRows               int64
	LedgerOnHand, LedgerSold int64
}

// ReadSKU reads a SKU's row and its ledger's sums.
func ReadSKU(t testing.TB, pool *pgxpool.Pool, sku string) SKURow {
	t.Helper()
	var s SKURow
	err := pool.QueryRow(t.Context(), `
		SELECT s.on_hand, s.sold,
			(SELECT count(*) FROM inventory_ledger l WHERE l.sku = s.sku),
			(SELECT coalesce(sum(delta_on_hand), 0) FROM inventory_ledger l WHERE l.sku = s.sku),
			(SELECT coalesce(sum(delta_sold), 0) FROM inventory_ledger l WHERE l.sku = s.sku)
		FROM skus s WHERE s.sku = $1`, sku).
		Scan(&s.OnHand, &s.Sold, &s.LedgerRows, &s.LedgerOnHand, &s.LedgerSold)
	if err != nil {
		t.Fatalf("read sku %s: %v", sku, err)
	}
	return s
}

// Count runs a SELECT count(*) query.
func Count(t testing.TB, pool *pgxpool.Pool, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

package store

import (
	"context"
	"fmt"
)

// LedgerNote appends a correction that changes neither on_hand nor sold.
func (s *Store) LedgerNote(ctx context.Context, sku, checkoutID, note string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason, checkout_id) VALUES ($1, 0, 0, $2, NULLIF($3, ''))`,
		sku, note, checkoutID)
	if err != nil {
		return fmt.Errorf("append ledger note for %s: %w", sku, err)
	}
	return nil
}

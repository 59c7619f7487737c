package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SecretVersion is the version of the checkout's secret: 0 until support first revokes it.
func (s *Store) SecretVersion(ctx context.Context, checkoutID string) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT version FROM checkout_secret_versions WHERE checkout_id = $1`, checkoutID).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read secret version of checkout %s: %w", checkoutID, err)
	}
	return v, nil
}

// RevokeSecret moves the checkout's secret to the next version and returns it: every secret
// signed with an earlier one stops opening the checkout.
func (s *Store) RevokeSecret(ctx context.Context, checkoutID string) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO checkout_secret_versions (checkout_id, version) VALUES ($1, 1)
		ON CONFLICT (checkout_id) DO UPDATE
			SET version = checkout_secret_versions.version + 1, revoked_at = now()
		RETURNING version`, checkoutID).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("revoke secret of checkout %s: %w", checkoutID, err)
	}
	return v, nil
}

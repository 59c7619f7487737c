package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// secretVersionsSQL reads the secret versions of the checkouts $1 (those never revoked have
// no row: version 0), for RecordedCheckouts.
const secretVersionsSQL = `SELECT checkout_id, version FROM checkout_secret_versions WHERE checkout_id = ANY($1)`

// scanSecretVersions reads secretVersionsSQL's rows into versions.
func scanSecretVersions(rows pgx.Rows, versions map[string]int64) error {
	var id string
	var v int64
	_, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error {
		versions[id] = v
		return nil
	})
	return err
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

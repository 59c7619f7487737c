package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ClaimCheckout binds a cart id to the client that started it, unless another client has it,
// and returns the owner (api.CheckoutOwners).
func (s *Store) ClaimCheckout(ctx context.Context, cartID, client string) (string, error) {
	var owner string
	var err error
	// Twice at most: a claim racing another client's sees neither row in its snapshot.
	for range 2 {
		if err = s.claimOnce(ctx, cartID, client, &owner); !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("claim cart %s for client %s: %w", cartID, client, err)
	}
	return owner, nil
}

func (s *Store) claimOnce(ctx context.Context, cartID, client string, owner *string) error {
	return s.pool.QueryRow(ctx, `
		WITH claimed AS (
			INSERT INTO checkout_clients (checkout_id, client_id) VALUES ($1, $2)
			ON CONFLICT (checkout_id) DO NOTHING RETURNING client_id)
		SELECT client_id FROM claimed UNION ALL SELECT client_id FROM checkout_clients WHERE checkout_id = $1
		LIMIT 1`, cartID, client).Scan(owner)
}

// CheckoutOwner returns the client that started a cart, or "" (api.CheckoutOwners).
func (s *Store) CheckoutOwner(ctx context.Context, cartID string) (string, error) {
	var owner string
	err := s.pool.QueryRow(ctx, `SELECT client_id FROM checkout_clients WHERE checkout_id = $1`, cartID).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the client of cart %s: %w", cartID, err)
	}
	return owner, nil
}

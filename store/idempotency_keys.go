package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/shop"
)

// ClaimIdempotencyKey binds c's key, within c's scope, to the cart and request hash of c unless
// it is already bound to a body younger than retention, and returns the binding that holds
// afterwards: c itself, or the body the key was first used with in that scope. A key older than retention counts as free even
// before PruneIdempotencyKeys deletes it, so a key's life does not depend on when pruning ran.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, c shop.IdempotencyClaim, retention time.Duration) (shop.IdempotencyClaim, error) {
	// Two statements, not one: a statement reads one snapshot, so when a concurrent request
	// inserts the same key first, only a new statement sees its row. A row pruned in between
	// makes the key free again; three rounds are plenty.
	for range 3 {
		tag, err := s.pool.Exec(ctx, `
			INSERT INTO idempotency_keys (scope, key, cart_id, request_hash) VALUES ($1, $2, $3, $4)
			ON CONFLICT (scope, key) DO UPDATE SET cart_id = EXCLUDED.cart_id, request_hash = EXCLUDED.request_hash, created_at = now()
			WHERE idempotency_keys.created_at < now() - make_interval(secs => $5)`,
			c.Scope, c.Key, c.CartID, c.RequestHash, retention.Seconds())
		if err != nil {
			return shop.IdempotencyClaim{}, fmt.Errorf("claim idempotency key %s for cart %s: %w", c.Key, c.CartID, err)
		}
		if tag.RowsAffected() == 1 {
			return c, nil
		}
		held := shop.IdempotencyClaim{Scope: c.Scope, Key: c.Key}
		err = s.pool.QueryRow(ctx, `SELECT cart_id, request_hash FROM idempotency_keys WHERE scope = $1 AND key = $2`, c.Scope, c.Key).
			Scan(&held.CartID, &held.RequestHash)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return shop.IdempotencyClaim{}, fmt.Errorf("read idempotency key %s: %w", c.Key, err)
		}
		return held, nil
	}
	return shop.IdempotencyClaim{}, fmt.Errorf("claim idempotency key %s for cart %s: the key kept disappearing while it was claimed", c.Key, c.CartID)
}

// pruneBatch bounds one DELETE, so pruning a large backlog never holds many row locks or
// one long transaction.
const pruneBatch = 10_000

// PruneIdempotencyKeys deletes keys older than retention and returns how many it deleted.
func (s *Store) PruneIdempotencyKeys(ctx context.Context, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM idempotency_keys WHERE (scope, key) IN (
				SELECT scope, key FROM idempotency_keys WHERE created_at < now() - make_interval(secs => $1) LIMIT $2)`,
			retention.Seconds(), pruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune idempotency keys older than %s: %w", retention, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/shop"
)

// ClaimIdempotencyKeys binds each claim's key, within its scope, to the cart and request
// hash of the claim unless it is already bound to a body younger than retention, and returns
// for each claim, in order, the binding that holds afterwards: the claim itself, or the body
// the key was first used with in that scope. Of two claims of one key in one call, only the
// first is tried; the second is told what holds after it. A key older than retention counts
// as free even before PruneIdempotencyKeys deletes it, so a key's life does not depend on
// when pruning ran. However many the claims, they take one round trip and one commit (the
// POSTs of a flash sale's opening second, each a new cart).
func (s *Store) ClaimIdempotencyKeys(ctx context.Context, claims []shop.IdempotencyClaim, retention time.Duration) ([]shop.IdempotencyClaim, error) {
	held := make(map[scopedKey]shop.IdempotencyClaim, len(claims))
	var pending []shop.IdempotencyClaim
	for _, c := range claims {
		if _, ok := held[scopedKey{c.Scope, c.Key}]; !ok {
			held[scopedKey{c.Scope, c.Key}] = shop.IdempotencyClaim{}
			pending = append(pending, c)
		}
	}
	// A key whose row was pruned between the two statements below is free again; three
	// rounds are plenty.
	for range 3 {
		if len(pending) == 0 {
			break
		}
		found, err := s.claimKeys(ctx, pending, retention)
		if err != nil {
			return nil, fmt.Errorf("claim %d idempotency keys: %w", len(pending), err)
		}
		missing := pending[:0]
		for _, c := range pending {
			if h, ok := found[scopedKey{c.Scope, c.Key}]; ok {
				held[scopedKey{c.Scope, c.Key}] = h
			} else {
				missing = append(missing, c)
			}
		}
		pending = missing
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("claim idempotency key %s for cart %s: the key kept disappearing while it was claimed", pending[0].Key, pending[0].CartID)
	}
	out := make([]shop.IdempotencyClaim, len(claims))
	for i, c := range claims {
		out[i] = held[scopedKey{c.Scope, c.Key}]
	}
	return out, nil
}

// scopedKey names a key within its caller's scope.
type scopedKey struct{ scope, key string }

// claimKeys runs one round of ClaimIdempotencyKeys (claims hold each key once) and returns
// the bindings it then reads, by scope and key. Two statements, not one: a statement reads
// one snapshot, so when a concurrent request inserts the same key first, only a new statement
// sees its row. The insert takes the keys in one order, so two rounds that share keys wait
// for each other instead of deadlocking.
func (s *Store) claimKeys(ctx context.Context, claims []shop.IdempotencyClaim, retention time.Duration) (map[scopedKey]shop.IdempotencyClaim, error) {
	scopes, keys, carts, hashes := make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		scopes[i], keys[i], carts[i], hashes[i] = c.Scope, c.Key, c.CartID, c.RequestHash
	}
	found := make(map[scopedKey]shop.IdempotencyClaim, len(claims))
	b := &pgx.Batch{}
	b.Queue(`
		INSERT INTO idempotency_keys (scope, key, cart_id, request_hash)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) ORDER BY 1, 2
		ON CONFLICT (scope, key) DO UPDATE SET cart_id = EXCLUDED.cart_id, request_hash = EXCLUDED.request_hash, created_at = now()
		WHERE idempotency_keys.created_at < now() - make_interval(secs => $5)`,
		scopes, keys, carts, hashes, retention.Seconds())
	b.Queue(`
		SELECT scope, key, cart_id, request_hash FROM idempotency_keys
		WHERE (scope, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, scopes, keys).
		Query(func(rows pgx.Rows) error {
			var c shop.IdempotencyClaim
			_, err := pgx.ForEachRow(rows, []any{&c.Scope, &c.Key, &c.CartID, &c.RequestHash}, func() error {
				found[scopedKey{c.Scope, c.Key}] = c
				return nil
			})
			return err
		})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return found, nil
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

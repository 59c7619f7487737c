package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// An Idempotency-Key binds to the first body it is used with, exactly once however many
// requests race for it, until retention frees it; pruning deletes only expired keys.
func TestIdempotencyKeyBindsToTheFirstBodyUntilRetention(t *testing.T) {
	pool, s := newStore(t)
	ctx := t.Context()
	const retention = time.Hour
	key := testenv.RandomID("key-")
	first := shop.IdempotencyClaim{Key: key, CartID: "a", RequestHash: "hash-a"}

	// Twenty requests race for one key with different bodies: exactly one body wins and every
	// request is told the same winner.
	var wg sync.WaitGroup
	won := make([]shop.IdempotencyClaim, 20)
	for i := range won {
		wg.Go(func() {
			c := first
			if i > 0 {
				c = shop.IdempotencyClaim{Key: key, CartID: "other", RequestHash: testenv.RandomID("hash-")}
			}
			held, err := s.ClaimIdempotencyKey(ctx, c, retention)
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
			won[i] = held
		})
	}
	wg.Wait()
	for i, held := range won {
		if held != won[0] {
			t.Errorf("claim %d was told %+v, claim 0 %+v: one key, one body", i, held, won[0])
		}
	}
	winner := won[0]

	// A key older than retention is free again, pruned or not.
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '2 hours' WHERE key = $1`, key); err != nil {
		t.Fatalf("age the key: %v", err)
	}
	again := shop.IdempotencyClaim{Key: key, CartID: "b", RequestHash: "hash-b"}
	if winner == again {
		t.Fatal("test bug: the new body must differ from the winner")
	}
	if held, err := s.ClaimIdempotencyKey(ctx, again, retention); err != nil || held != again {
		t.Errorf("claim of an expired key = %+v, %v; want %+v", held, err, again)
	}

	// Pruning deletes only keys older than retention.
	old := testenv.RandomID("old-")
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (key, cart_id, request_hash, created_at) VALUES ($1, 'c', 'h', now() - interval '2 hours')`, old); err != nil {
		t.Fatalf("insert an old key: %v", err)
	}
	n, err := s.PruneIdempotencyKeys(ctx, retention)
	if err != nil || n != 1 {
		t.Errorf("prune = %d, %v; want 1 (the old key only)", n, err)
	}
	var left []string
	rows, _ := pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		left = append(left, k)
	}
	if len(left) != 1 || left[0] != key {
		t.Errorf("keys after pruning = %v, want [%s]", left, key)
	}
}

// A key is its caller's: the same key in two scopes binds two bodies, each answered to its own
// caller, and pruning one scope's expired key leaves the other's.
func TestIdempotencyKeysAreScopedByCaller(t *testing.T) {
	pool, s := newStore(t)
	ctx := t.Context()
	key := testenv.RandomID("key-")
	a := shop.IdempotencyClaim{Scope: "client/shop-a", Key: key, CartID: "a-1", RequestHash: "hash-a"}
	b := shop.IdempotencyClaim{Scope: "client/shop-b", Key: key, CartID: key, RequestHash: "hash-b"}
	for _, c := range []shop.IdempotencyClaim{a, b, a, b} {
		if held, err := s.ClaimIdempotencyKey(ctx, c, time.Hour); err != nil || held != c {
			t.Errorf("claim %+v = %+v, %v; want it bound to its own body", c, held, err)
		}
	}
	other := shop.IdempotencyClaim{Scope: a.Scope, Key: key, CartID: "a-2", RequestHash: "hash-a2"}
	if held, err := s.ClaimIdempotencyKey(ctx, other, time.Hour); err != nil || held != a {
		t.Errorf("shop-a's key with another body = %+v, %v; want shop-a's first body %+v", held, err, a)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '2 hours' WHERE scope = $1 AND key = $2`, a.Scope, key); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneIdempotencyKeys(ctx, time.Hour); err != nil || n != 1 {
		t.Errorf("prune = %d, %v; want 1 (shop-a's expired key)", n, err)
	}
	if held, err := s.ClaimIdempotencyKey(ctx, shop.IdempotencyClaim{Scope: b.Scope, Key: key, CartID: "b-2", RequestHash: "hash-b2"}, time.Hour); err != nil || held != b {
		t.Errorf("shop-b's key after pruning = %+v, %v; want shop-b's body %+v kept", held, err, b)
	}
}

package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
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
			held, err := claimOne(ctx, s, c, retention)
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
	if held, err := claimOne(ctx, s, again, retention); err != nil || held != again {
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
		if held, err := claimOne(ctx, s, c, time.Hour); err != nil || held != c {
			t.Errorf("claim %+v = %+v, %v; want it bound to its own body", c, held, err)
		}
	}
	other := shop.IdempotencyClaim{Scope: a.Scope, Key: key, CartID: "a-2", RequestHash: "hash-a2"}
	if held, err := claimOne(ctx, s, other, time.Hour); err != nil || held != a {
		t.Errorf("shop-a's key with another body = %+v, %v; want shop-a's first body %+v", held, err, a)
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '2 hours' WHERE scope = $1 AND key = $2`, a.Scope, key); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneIdempotencyKeys(ctx, time.Hour); err != nil || n != 1 {
		t.Errorf("prune = %d, %v; want 1 (shop-a's expired key)", n, err)
	}
	if held, err := claimOne(ctx, s, shop.IdempotencyClaim{Scope: b.Scope, Key: key, CartID: "b-2", RequestHash: "hash-b2"}, time.Hour); err != nil || held != b {
		t.Errorf("shop-b's key after pruning = %+v, %v; want shop-b's body %+v kept", held, err, b)
	}
}

// claimOne is one claim alone.
func claimOne(ctx context.Context, s *store.Store, c shop.IdempotencyClaim, retention time.Duration) (shop.IdempotencyClaim, error) {
	held, err := s.ClaimIdempotencyKeys(ctx, []shop.IdempotencyClaim{c}, retention)
	if err != nil {
		return shop.IdempotencyClaim{}, err
	}
	return held[0], nil
}

// Many batches of claims race over a few keys in two scopes, each batch in one round trip,
// the keys in any order and some twice in one batch (a generated schedule, its seed logged):
// no batch fails (none deadlocks on another's keys), every claim of a key is told the one
// body that holds it, which is one of the bodies claimed and the row Postgres keeps, and a
// claim is told its own body only when that body holds.
func TestBatchesOfClaimsRacingOverKeysAgreeOnOneBodyEach(t *testing.T) {
	pool, s := newStore(t)
	ctx := t.Context()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	prefix := testenv.RandomID("race-")
	const batches, keysPerScope = 40, 6
	schedule := make([][]shop.IdempotencyClaim, batches)
	for b := range schedule {
		for i := range 1 + rng.IntN(12) {
			schedule[b] = append(schedule[b], shop.IdempotencyClaim{
				Scope:       fmt.Sprint("scope-", rng.IntN(2)),
				Key:         fmt.Sprint(prefix, rng.IntN(keysPerScope)),
				CartID:      fmt.Sprintf("cart-%d-%d", b, i),
				RequestHash: fmt.Sprintf("hash-%d-%d", b, i),
			})
		}
	}
	told := make([][]shop.IdempotencyClaim, batches)
	var wg sync.WaitGroup
	for b := range schedule {
		wg.Go(func() {
			held, err := s.ClaimIdempotencyKeys(ctx, schedule[b], time.Hour)
			if err != nil {
				t.Errorf("batch %d: %v", b, err)
			}
			told[b] = held
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	kept := map[[2]string]shop.IdempotencyClaim{}
	rows, err := pool.Query(ctx, `SELECT scope, key, cart_id, request_hash FROM idempotency_keys WHERE key LIKE $1`, prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c shop.IdempotencyClaim
		if err := rows.Scan(&c.Scope, &c.Key, &c.CartID, &c.RequestHash); err != nil {
			t.Fatal(err)
		}
		kept[[2]string{c.Scope, c.Key}] = c
	}
	claimed := map[shop.IdempotencyClaim]bool{}
	for _, batch := range schedule {
		for _, c := range batch {
			claimed[c] = true
		}
	}
	for b, batch := range schedule {
		for i, c := range batch {
			got, want := told[b][i], kept[[2]string{c.Scope, c.Key}]
			if got != want || !claimed[want] {
				t.Errorf("batch %d claim %d (%+v) was told %+v; Postgres keeps %+v", b, i, c, got, want)
			}
		}
	}
}

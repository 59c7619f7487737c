package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/store"
)

// The pool has DefaultPoolMaxConns connections unless DATABASE_URL names pool_max_conns:
// pgx's default pool is 4 connections on a 2-core box.
func TestNewPoolSizesThePool(t *testing.T) {
	url, _ := testenv.Postgres(t)
	for _, tt := range []struct {
		url  string
		want int
	}{{url, store.DefaultPoolMaxConns}, {url + "?pool_max_conns=7", 7}} {
		pool, err := store.NewPool(t.Context(), tt.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := store.New(pool).MaxConns(); got != tt.want {
			t.Errorf("pool of %s: %d connections, want %d", tt.url, got, tt.want)
		}
		pool.Close()
	}
}

// newStore is a store over a fresh, migrated database, and its pool for the tests that
// read the tables or put SKUs directly.
func newStore(t testing.TB) (*pgxpool.Pool, *store.Store) {
	t.Helper()
	_, pool := testenv.Postgres(t)
	return pool, store.New(pool)
}

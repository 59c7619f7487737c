// Package store is the product's Postgres: one file per table (skus, checkouts, orders,
// payment_events, refunds, idempotency_keys, stock_changes, checkout_clients,
// inventory_ledger), as River keeps its queries. Every write is keyed so that a retry is
// harmless (unique keys, ON CONFLICT), and errors are plain Go errors: the activities map
// them to Temporal application errors, the API to HTTP answers.
//
// store may import the vocabulary (shop) and lua (ResyncStock repairs Redis under a SKU's
// row lock); never activities, workflows, inventory or api.
package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the Postgres side of the product: the catalog, checkouts, orders, payment events
// and the inventory ledger. Every write is keyed so that a retry is harmless.
type Store struct {
	pool *pgxpool.Pool
	// MaxOpenPerCustomer caps a customer's open checkouts (0: no cap); RecordCheckout ends a
	// checkout over it as refused, with reason shop.RejectTooManyOpen.
	MaxOpenPerCustomer int
}

// DefaultMaxOpenPerCustomer is how many open checkouts one customer may have at once
// (MAX_OPEN_CHECKOUTS_PER_CUSTOMER): enough for a buyer with a few tabs, far too few to hold
// a sale's stock from one account.
const DefaultMaxOpenPerCustomer = 5

// New wraps a pgx pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// DefaultPoolMaxConns is the Postgres pool size when DATABASE_URL does not name one
// (pool_max_conns=N). pgx's own default, max(4, CPUs), is 4 on a 2-core box, against up to a
// thousand concurrent local activities whose 5 s and 10 s budgets were eaten by the wait for
// a connection. 32 keeps a flash sale's confirms (one short transaction each) flowing and
// stays well under Postgres's default max_connections of 100 with an API and a worker.
const DefaultPoolMaxConns = 32

// NewPool opens a pgx pool on databaseURL with DefaultPoolMaxConns connections unless the
// URL sets pool_max_conns. tracer, when not nil, sees every query (tracing.PgxTracer).
func NewPool(ctx context.Context, databaseURL string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = tracer
	if !strings.Contains(databaseURL, "pool_max_conns") {
		cfg.MaxConns = DefaultPoolMaxConns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// MaxConns is the size of the Postgres pool: the worker runs at most this many local
// activities at once, so none waits for a connection past its timeout.
func (s *Store) MaxConns() int { return int(s.pool.Config().MaxConns) }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

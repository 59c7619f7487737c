package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/lua"
)

// Store is the Postgres side of the product: the catalog, checkouts, orders, payment events
// and the inventory ledger. Every write is keyed so that a retry is harmless.
type Store struct {
	pool *pgxpool.Pool
	// MaxOpenPerCustomer caps a customer's open checkouts (0: no cap); RecordCheckout ends a
	// checkout over it as refused, with reason ReasonTooManyOpen.
	MaxOpenPerCustomer int
}

// Reasons RecordCheckout records on a checkout it refuses for a per-customer limit; the
// checkout ends as out_of_stock (nothing was held) with one of them as its reason.
const (
	ReasonCustomerLimit = "customer_limit"
	ReasonTooManyOpen   = "too_many_open_checkouts"
)

// NewStore wraps a pgx pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

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

// Products returns the catalog rows of the given SKUs; SKUs that do not exist are absent
// from the map.
func (s *Store) Products(ctx context.Context, skus []string) (map[string]Product, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT sku, on_hand, sold, price_cents, currency, max_per_order, max_per_customer, version FROM skus WHERE sku = ANY($1)`, skus)
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	products, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Product])
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	out := make(map[string]Product, len(products))
	for _, p := range products {
		out[p.SKU] = p
	}
	return out, nil
}

// Checkout reads one checkout with its items.
func (s *Store) Checkout(ctx context.Context, checkoutID string) (CheckoutRecord, error) {
	var c CheckoutRecord
	var reason, orderID *string
	err := s.pool.QueryRow(ctx, `
		SELECT c.checkout_id, c.customer_id, c.status, c.currency, c.amount_cents, c.expires_at, c.reason, c.order_id,
			c.created_at, c.ended_at, coalesce(o.payment_provider, ''), coalesce(o.payment_ref, '')
		FROM checkouts c LEFT JOIN orders o ON o.checkout_id = c.checkout_id WHERE c.checkout_id = $1`, checkoutID).
		Scan(&c.CheckoutID, &c.CustomerID, &c.Status, &c.Currency, &c.AmountCents, &c.ExpiresAt, &reason, &orderID,
			&c.CreatedAt, &c.EndedAt, &c.PaymentProvider, &c.PaymentRef)
	if errors.Is(err, pgx.ErrNoRows) {
		return CheckoutRecord{}, fmt.Errorf("read checkout %s: %w", checkoutID, ErrNotFound)
	}
	if err != nil {
		return CheckoutRecord{}, fmt.Errorf("read checkout %s: %w", checkoutID, err)
	}
	if reason != nil {
		c.Reason = *reason
	}
	if orderID != nil {
		c.OrderID = *orderID
	}
	rows, err := s.pool.Query(ctx, `
		SELECT sku, quantity, unit_price_cents FROM checkout_items WHERE checkout_id = $1 ORDER BY sku`, checkoutID)
	if err != nil {
		return CheckoutRecord{}, fmt.Errorf("read items of checkout %s: %w", checkoutID, err)
	}
	c.Items, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Item])
	if err != nil {
		return CheckoutRecord{}, fmt.Errorf("read items of checkout %s: %w", checkoutID, err)
	}
	return c, nil
}

// insertCheckout records a new checkout with priced items. A checkout that already exists is
// left as it is and its stored items are returned, so a retried activity sees the same cart.
func (s *Store) insertCheckout(ctx context.Context, c CheckoutRecord, limits map[string]int64) (CheckoutRecord, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		refusal, err := s.overCustomerLimits(ctx, tx, c, limits)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (checkout_id) DO NOTHING`,
			c.CheckoutID, c.CustomerID, StatusOpen, c.Currency, c.AmountCents)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // recorded by an earlier attempt
		}
		for _, it := range c.Items {
			if _, err := tx.Exec(ctx, `
				INSERT INTO checkout_items (checkout_id, sku, quantity, unit_price_cents) VALUES ($1, $2, $3, $4)`,
				c.CheckoutID, it.SKU, it.Quantity, it.UnitPriceCents); err != nil {
				return err
			}
		}
		if refusal != "" {
			// Recorded as ended, so a retry (and a GET after retention) answers the same.
			_, err = tx.Exec(ctx, `UPDATE checkouts SET status = $2, reason = $3, ended_at = now(), updated_at = now() WHERE checkout_id = $1`,
				c.CheckoutID, "out_of_stock", refusal)
		}
		return err
	})
	if err != nil {
		return CheckoutRecord{}, fmt.Errorf("record checkout %s: %w", c.CheckoutID, err)
	}
	rec, err := s.Checkout(ctx, c.CheckoutID)
	if err != nil {
		return CheckoutRecord{}, err
	}
	if rec.Payments, err = s.matchOrphans(ctx, c.CheckoutID); err != nil {
		return CheckoutRecord{}, err
	}
	return rec, nil
}

// overCustomerLimits judges a new checkout against its customer's limits: the cap on open
// checkouts and each SKU's max_per_customer (limits, SKU -> units; SKUs without one absent),
// counted over the customer's open and confirmed checkouts. It takes a lock per customer
// first, held to the end of tx, so a customer's concurrent checkouts are judged one at a
// time against everything recorded before them: a thousand at once hold exactly the limit.
// It returns the refusal's reason, or "".
func (s *Store) overCustomerLimits(ctx context.Context, tx pgx.Tx, c CheckoutRecord, limits map[string]int64) (string, error) {
	if s.MaxOpenPerCustomer <= 0 && len(limits) == 0 {
		return "", nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('checkout customer ' || $1, 0))`, c.CustomerID); err != nil {
		return "", fmt.Errorf("lock customer %s: %w", c.CustomerID, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM checkouts WHERE checkout_id = $1)`, c.CheckoutID).Scan(&exists); err != nil || exists {
		return "", err // a retry: judged the first time
	}
	if s.MaxOpenPerCustomer > 0 {
		var open int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM checkouts WHERE customer_id = $1 AND ended_at IS NULL`, c.CustomerID).Scan(&open); err != nil {
			return "", fmt.Errorf("count open checkouts of customer %s: %w", c.CustomerID, err)
		}
		if open >= s.MaxOpenPerCustomer {
			return ReasonTooManyOpen, nil
		}
	}
	for _, it := range c.Items {
		limit, ok := limits[it.SKU]
		if !ok {
			continue
		}
		var units int64
		if err := tx.QueryRow(ctx, `
			SELECT coalesce(sum(ci.quantity), 0) FROM checkout_items ci JOIN checkouts co USING (checkout_id)
			WHERE co.customer_id = $1 AND ci.sku = $2 AND (co.ended_at IS NULL OR co.status = 'confirmed')`,
			c.CustomerID, it.SKU).Scan(&units); err != nil {
			return "", fmt.Errorf("count units of %s of customer %s: %w", it.SKU, c.CustomerID, err)
		}
		if units+it.Quantity > limit {
			return ReasonCustomerLimit, nil
		}
	}
	return "", nil
}

// matchOrphans claims the payment events recorded for a checkout that its saga has not been
// told about: webhooks that came before the checkout existed (disposition orphan), and any
// still being handled (pending; the saga ignores the second delivery by event id). Claiming
// sets the disposition to matched, so the orphan sweeper never refunds a payment a saga
// has; a retried call claims the same events again.
func (s *Store) matchOrphans(ctx context.Context, checkoutID string) ([]RecordedPayment, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE payment_events SET disposition = $2
		WHERE checkout_id = $1 AND outcome IS NOT NULL AND disposition IN ($2, $3, $4)
		RETURNING provider, event_id, outcome, coalesce(payment_ref, ''), coalesce(amount_cents, 0), coalesce(currency, '')`,
		checkoutID, DispositionMatched, DispositionOrphan, DispositionPending)
	if err != nil {
		return nil, fmt.Errorf("match orphan payments of checkout %s: %w", checkoutID, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RecordedPayment])
	if err != nil {
		return nil, fmt.Errorf("match orphan payments of checkout %s: %w", checkoutID, err)
	}
	return found, nil
}

// errInsufficientOnHand means Postgres has fewer units than an order needs: the Redis holds
// and Postgres disagree, which support must look at.
var errInsufficientOnHand = errors.New("postgres on_hand is lower than the order's quantity")

// errPaidOtherwise means the checkout's order exists and names another payment.
var errPaidOtherwise = errors.New("the order was paid by another payment")

// errCheckoutEnded means an order was asked for a checkout that already ended otherwise.
var errCheckoutEnded = errors.New("the checkout already ended without an order")

// confirmOrder writes the order, its lines, the stock change, the ledger rows and the
// checkout's end in one transaction. A second call for the same checkout finds the order
// (orders.checkout_id is unique) and returns it without changing anything.
func (s *Store) confirmOrder(ctx context.Context, in ConfirmOrderInput) (orderID string, created bool, err error) {
	orderID = OrderID(in.CheckoutID)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO orders (order_id, checkout_id, customer_id, amount_cents, currency, payment_provider, payment_ref)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (checkout_id) DO NOTHING`,
			orderID, in.CheckoutID, in.CustomerID, in.AmountCents, in.Currency, in.PaymentProvider, in.PaymentRef)
		if err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// Confirmed by an earlier attempt, if that attempt was for this payment. An
			// order paid by another payment is not this payment's: it must be refunded.
			var provider, ref string
			if err := tx.QueryRow(ctx, `SELECT payment_provider, payment_ref FROM orders WHERE checkout_id = $1`,
				in.CheckoutID).Scan(&provider, &ref); err != nil {
				return fmt.Errorf("read existing order: %w", err)
			}
			if provider != in.PaymentProvider || ref != in.PaymentRef {
				return fmt.Errorf("order %s was paid by %s payment %s: %w", orderID, provider, ref, errPaidOtherwise)
			}
			return nil
		}
		created = true
		for _, it := range in.Items {
			if _, err := tx.Exec(ctx, `
				INSERT INTO order_lines (order_id, sku, quantity, unit_price_cents) VALUES ($1, $2, $3, $4)`,
				orderID, it.SKU, it.Quantity, it.UnitPriceCents); err != nil {
				return fmt.Errorf("insert order line %s: %w", it.SKU, err)
			}
			tag, err := tx.Exec(ctx, `
				UPDATE skus SET on_hand = on_hand - $2, sold = sold + $2, updated_at = now()
				WHERE sku = $1 AND on_hand >= $2`, it.SKU, it.Quantity)
			if err != nil {
				return fmt.Errorf("take %d x %s from on_hand: %w", it.Quantity, it.SKU, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("take %d x %s from on_hand: %w", it.Quantity, it.SKU, errInsufficientOnHand)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason, checkout_id)
				VALUES ($1, $2, $3, 'sold', $4)`, it.SKU, -it.Quantity, it.Quantity, in.CheckoutID); err != nil {
				return fmt.Errorf("append ledger for %s: %w", it.SKU, err)
			}
		}
		tag, err = tx.Exec(ctx, `
			UPDATE checkouts SET status = 'confirmed', order_id = $2, reason = NULL, expires_at = $3,
				ended_at = now(), updated_at = now()
			WHERE checkout_id = $1 AND ended_at IS NULL`, in.CheckoutID, orderID, in.ExpiresAt)
		if err != nil {
			return fmt.Errorf("mark checkout confirmed: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A checkout that already ended (expired, cancelled) released its units:
			// confirming it now would sell stock that is no longer held.
			return fmt.Errorf("mark checkout confirmed: %w", errCheckoutEnded)
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, err)
	}
	return orderID, created, nil
}

// recordOutcome writes how a checkout ended. Only the first end is kept: a checkout that has
// ended is never rewritten, so a retry or a late duplicate changes nothing.
func (s *Store) recordOutcome(ctx context.Context, in RecordOutcomeInput) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE checkouts SET status = $2, reason = NULLIF($3, ''), expires_at = $4, ended_at = now(), updated_at = now()
		WHERE checkout_id = $1 AND ended_at IS NULL`, in.CheckoutID, in.Status, in.Reason, in.ExpiresAt)
	if err != nil {
		return fmt.Errorf("record outcome %s of checkout %s: %w", in.Status, in.CheckoutID, err)
	}
	return nil
}

// RecordPaymentEvent stores a verified event once per provider and event id.
func (s *Store) RecordPaymentEvent(ctx context.Context, ev PaymentEvent) (RecordedEvent, error) {
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO payment_events (provider, event_id, event_type, checkout_id, payment_ref, amount_cents, currency, payload, outcome)
		VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6, NULLIF($7, ''), $8, NULLIF($9, ''))
		ON CONFLICT (provider, event_id) DO NOTHING`,
		ev.Provider, ev.EventID, ev.Type, ev.CheckoutID, ev.PaymentRef, ev.AmountCents, ev.Currency, ev.Payload, ev.Outcome)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return RecordedEvent{}, fmt.Errorf("record %s event %q: %w: %w", ev.Provider, ev.EventID, ErrUnstorableEvent, err)
	}
	if err != nil {
		return RecordedEvent{}, fmt.Errorf("record %s event %s: %w", ev.Provider, ev.EventID, err)
	}
	if tag.RowsAffected() == 1 {
		return RecordedEvent{New: true}, nil
	}
	var deliveredAt *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT delivered_at FROM payment_events WHERE provider = $1 AND event_id = $2`,
		ev.Provider, ev.EventID).Scan(&deliveredAt); err != nil {
		return RecordedEvent{}, fmt.Errorf("read %s event %s: %w", ev.Provider, ev.EventID, err)
	}
	return RecordedEvent{Delivered: deliveredAt != nil}, nil
}

// MarkPaymentEventDelivered records that an event reached its end (a saga, or a decision
// not to send it anywhere) so a redelivery changes nothing.
func (s *Store) MarkPaymentEventDelivered(ctx context.Context, provider, eventID, disposition string) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE payment_events SET delivered_at = now(), disposition = $3
		WHERE provider = $1 AND event_id = $2 AND delivered_at IS NULL`, provider, eventID, disposition)
	if err != nil {
		return fmt.Errorf("mark %s event %s delivered: %w", provider, eventID, err)
	}
	return nil
}

// recordRefund upserts a refund's state; a refund that was recorded as refunded stays so.
func (s *Store) recordRefund(ctx context.Context, in RecordRefundInput) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO refunds (refund_key, checkout_id, provider, payment_ref, amount_cents, currency, reason, status, provider_refund_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULLIF($9, ''))
		ON CONFLICT (refund_key) DO UPDATE SET status = EXCLUDED.status,
			provider_refund_id = COALESCE(EXCLUDED.provider_refund_id, refunds.provider_refund_id), updated_at = now()
		WHERE refunds.status <> 'refunded'`,
		in.ID, in.CheckoutID, in.Provider, in.PaymentRef, in.AmountCents, in.Currency, in.Reason, in.Status, in.ProviderRefundID)
	if err != nil {
		return fmt.Errorf("record refund %s: %w", in.ID, err)
	}
	return nil
}

// OrderPaymentRef returns the payment reference recorded on the checkout's order.
func (s *Store) OrderPaymentRef(ctx context.Context, checkoutID string) (string, error) {
	var ref string
	err := s.pool.QueryRow(ctx, `SELECT payment_ref FROM orders WHERE checkout_id = $1`, checkoutID).Scan(&ref)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read order of checkout %s: %w", checkoutID, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("read order of checkout %s: %w", checkoutID, err)
	}
	return ref, nil
}

// openHolds lists the open checkouts' quantities of a SKU: every hold that can exist.
func openHolds(ctx context.Context, tx pgx.Tx, sku string) ([]lua.Hold, error) {
	rows, err := tx.Query(ctx, `
		SELECT ci.checkout_id, ci.quantity FROM checkout_items ci JOIN checkouts c USING (checkout_id)
		WHERE ci.sku = $1 AND c.ended_at IS NULL`, sku)
	if err != nil {
		return nil, fmt.Errorf("read open checkouts of %s: %w", sku, err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[lua.Hold])
}

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

package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Checkout reads one checkout with its items, in one round trip.
func (s *Store) Checkout(ctx context.Context, checkoutID string) (shop.CheckoutRecord, error) {
	var c shop.CheckoutRecord
	b := &pgx.Batch{}
	queueReadCheckout(b, checkoutID, &c)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return shop.CheckoutRecord{}, err
	}
	return c, nil
}

// openCheckoutsSQL counts the open checkouts of each customer of $1, through
// checkouts_open_customer_idx (migration 013): a customer's past checkouts are not read.
const openCheckoutsSQL = `SELECT customer_id, count(*) FROM checkouts WHERE customer_id = ANY($1) AND ended_at IS NULL GROUP BY customer_id`

// RecordedCheckouts reads, in one round trip however many they are, which of ids Postgres
// has recorded as checkouts (with the fingerprint of the request that created each, and
// whether it ended), the
// secret versions of ids, and the standing of each of customers (their open checkouts, and
// their units of skus in open and confirmed checkouts, as InsertCheckout counts them for its
// limits). Every POST asks it, many at a time (api's recordedCheck).
func (s *Store) RecordedCheckouts(ctx context.Context, ids, customers, skus []string) (shop.Recorded, error) {
	r := shop.Recorded{Creators: make(map[string]shop.Fingerprint, len(ids)), Ended: map[string]bool{}, Standings: map[string]shop.Standing{}, SecretVersions: map[string]int64{}}
	standing := func(customer string) shop.Standing {
		st := r.Standings[customer]
		if st.Units == nil {
			st.Units = map[string]int64{}
		}
		return st
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT checkout_id, request_hash, idempotency_key, caller, ended_at IS NOT NULL FROM checkouts WHERE checkout_id = ANY($1)`, ids).
		Query(func(rows pgx.Rows) error {
			var id string
			var f shop.Fingerprint
			var ended bool
			_, err := pgx.ForEachRow(rows, []any{&id, &f.RequestHash, &f.IdempotencyKey, &f.Caller, &ended}, func() error {
				r.Creators[id] = f
				if ended {
					r.Ended[id] = true
				}
				return nil
			})
			return err
		})
	b.Queue(secretVersionsSQL, ids).Query(func(rows pgx.Rows) error { return scanSecretVersions(rows, r.SecretVersions) })
	if len(customers) > 0 {
		b.Queue(openCheckoutsSQL, customers).
			Query(func(rows pgx.Rows) error {
				var customer string
				var open int64
				_, err := pgx.ForEachRow(rows, []any{&customer, &open}, func() error {
					st := standing(customer)
					st.Open = open
					r.Standings[customer] = st
					return nil
				})
				return err
			})
	}
	if len(customers) > 0 && len(skus) > 0 {
		b.Queue(`
			SELECT co.customer_id, ci.sku, sum(ci.quantity) FROM checkouts co JOIN checkout_items ci USING (checkout_id)
			WHERE co.customer_id = ANY($1) AND ci.sku = ANY($2) AND (co.ended_at IS NULL OR co.status = 'confirmed')
			GROUP BY co.customer_id, ci.sku`, customers, skus).
			Query(func(rows pgx.Rows) error {
				var customer, sku string
				var units int64
				_, err := pgx.ForEachRow(rows, []any{&customer, &sku, &units}, func() error {
					st := standing(customer)
					st.Units[sku] = units
					r.Standings[customer] = st
					return nil
				})
				return err
			})
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return shop.Recorded{}, fmt.Errorf("read which of %d checkouts are recorded, and %d customers' standing: %w", len(ids), len(customers), err)
	}
	return r, nil
}

// queueReadCheckout queues the two reads of a checkout (its row, its items) into c. A
// checkout Postgres does not know fails the batch with shop.ErrNotFound.
func queueReadCheckout(b *pgx.Batch, checkoutID string, c *shop.CheckoutRecord) {
	b.Queue(`
		SELECT c.checkout_id, c.customer_id, c.status, c.currency, c.amount_cents, c.expires_at, c.reason, c.order_id,
			c.created_at, c.ended_at, coalesce(o.payment_provider, ''), coalesce(o.payment_ref, ''),
			c.request_hash, c.idempotency_key, c.caller
		FROM checkouts c LEFT JOIN orders o ON o.checkout_id = c.checkout_id WHERE c.checkout_id = $1`, checkoutID).
		QueryRow(func(row pgx.Row) error {
			var reason, orderID *string
			err := row.Scan(&c.CheckoutID, &c.CustomerID, &c.Status, &c.Currency, &c.AmountCents, &c.ExpiresAt, &reason, &orderID,
				&c.CreatedAt, &c.EndedAt, &c.PaymentProvider, &c.PaymentRef,
				&c.RequestHash, &c.IdempotencyKey, &c.Caller)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read checkout %s: %w", checkoutID, shop.ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("read checkout %s: %w", checkoutID, err)
			}
			if reason != nil {
				c.Reason = *reason
			}
			if orderID != nil {
				c.OrderID = *orderID
			}
			return nil
		})
	b.Queue(`SELECT sku, quantity, unit_price_cents FROM checkout_items WHERE checkout_id = $1 ORDER BY sku`, checkoutID).
		Query(func(rows pgx.Rows) error {
			items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[shop.Item])
			if err != nil {
				return fmt.Errorf("read items of checkout %s: %w", checkoutID, err)
			}
			c.Items = items
			return nil
		})
}

// InsertCheckout records a new checkout with priced items. A checkout that already exists is
// left as it is and its stored items are returned, so a retried activity sees the same cart.
// Payments recorded for the checkout before it existed (orphans) are claimed for it, in the
// same transaction.
//
// It is one round trip: a pipelined batch, which Postgres runs as one transaction. With
// limits on (MaxOpenPerCustomer, or a SKU of the cart with max_per_customer), the batch
// first takes a lock per customer, held to its end, so a customer's concurrent checkouts are
// judged one at a time against everything recorded before them: a thousand at once hold
// exactly the limit. The statement after the lock sees what the lock's last holder
// committed (each statement of a read-committed transaction reads afresh), judges the cart
// (limits, listing each SKU's max_per_customer, SKUs without one absent) and records it:
// refused over a limit, recorded as ended at once, with the limit as its reason. Then the
// stored checkout as it now is, and the orphan claim.
func (s *Store) InsertCheckout(ctx context.Context, c shop.CheckoutRecord, limits map[string]int64) (shop.CheckoutRecord, error) {
	var rec shop.CheckoutRecord
	skus, quantities, prices, maxUnits := make([]string, len(c.Items)), make([]int64, len(c.Items)), make([]int64, len(c.Items)), make([]int64, len(c.Items))
	for i, it := range c.Items {
		skus[i], quantities[i], prices[i], maxUnits[i] = it.SKU, it.Quantity, it.UnitPriceCents, limits[it.SKU]
	}
	b := &pgx.Batch{}
	if s.MaxOpenPerCustomer > 0 || len(limits) > 0 {
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('checkout customer ' || $1, 0))`, c.CustomerID)
	}
	// A checkout recorded before is not judged again: the insert does nothing. The per-SKU
	// count is in the statement only for a cart with a SKU limit: Postgres plans a statement
	// with it afresh at every run (its generic plan looks dearer), a cost every checkout
	// would pay for the few SKUs that have a limit.
	args := []any{c.CheckoutID, c.CustomerID, shop.RecordOpen, c.Currency, c.AmountCents, skus, quantities, prices,
		s.MaxOpenPerCustomer, shop.RejectTooManyOpen, string(shop.StatusOutOfStock), c.RequestHash, c.IdempotencyKey, c.Caller}
	skuLimits := ""
	if len(limits) > 0 {
		skuLimits = `
				WHEN EXISTS (
					SELECT 1 FROM unnest($6::text[], $7::bigint[], $15::bigint[]) AS l (sku, quantity, max_units)
					WHERE l.max_units > 0 AND l.quantity + (
						SELECT coalesce(sum(ci.quantity), 0) FROM checkout_items ci JOIN checkouts co USING (checkout_id)
						WHERE co.customer_id = $2 AND ci.sku = l.sku AND (co.ended_at IS NULL OR co.status = 'confirmed')) > l.max_units)
					THEN $16`
		args = append(args, maxUnits, shop.RejectCustomerLimit)
	}
	b.Queue(`
		WITH judged AS (
			SELECT CASE
				WHEN $9::int > 0 AND (SELECT count(*) FROM checkouts WHERE customer_id = $2 AND ended_at IS NULL) >= $9
					THEN $10`+skuLimits+`
				ELSE '' END AS refusal),
		new AS (
			INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents, reason, ended_at,
				request_hash, idempotency_key, caller)
			SELECT $1, $2, CASE WHEN refusal = '' THEN $3 ELSE $11 END, $4, $5, NULLIF(refusal, ''),
				CASE WHEN refusal = '' THEN NULL ELSE now() END, $12, $13, $14
			FROM judged
			ON CONFLICT (checkout_id) DO NOTHING
			RETURNING checkout_id)
		INSERT INTO checkout_items (checkout_id, sku, quantity, unit_price_cents)
		SELECT new.checkout_id, i.sku, i.quantity, i.price
		FROM new, unnest($6::text[], $7::bigint[], $8::bigint[]) AS i (sku, quantity, price)`, args...)
	queueReadCheckout(b, c.CheckoutID, &rec)
	queueMatchOrphans(b, c.CheckoutID, &rec.Payments)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("record checkout %s: %w", c.CheckoutID, err)
	}
	return rec, nil
}

// RecordEnd records a checkout that ended before it had a saga: cancelled while it waited in
// the waiting room. A checkout already recorded is left as it is. It returns the status
// Postgres holds: c's, or the one recorded before (another end, or shop.RecordOpen when a
// saga recorded the cart). The end is what a cart that comes back to the room finds, when
// Redis, which keeps the room, goes back in time: its saga adopts the end and holds nothing
// (workflows' adoptEnded).
func (s *Store) RecordEnd(ctx context.Context, c shop.CheckoutRecord) (string, error) {
	skus, quantities, prices := make([]string, len(c.Items)), make([]int64, len(c.Items)), make([]int64, len(c.Items))
	for i, it := range c.Items {
		skus[i], quantities[i], prices[i] = it.SKU, it.Quantity, it.UnitPriceCents
	}
	var status string
	err := s.pool.QueryRow(ctx, `
		WITH new AS (
			INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents, reason, ended_at,
				request_hash, idempotency_key, caller)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), now(), $10, $11, $12)
			ON CONFLICT (checkout_id) DO NOTHING
			RETURNING checkout_id, status),
		items AS (
			INSERT INTO checkout_items (checkout_id, sku, quantity, unit_price_cents)
			SELECT new.checkout_id, i.sku, i.quantity, i.price
			FROM new, unnest($7::text[], $8::bigint[], $9::bigint[]) AS i (sku, quantity, price))
		SELECT status FROM new`,
		c.CheckoutID, c.CustomerID, c.Status, c.Currency, c.AmountCents, c.Reason, skus, quantities, prices,
		c.RequestHash, c.IdempotencyKey, c.Caller).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		// Recorded before. Read it in a statement of its own: the insert waited for a record
		// committing at the same moment (the saga's), which its own snapshot cannot see.
		err = s.pool.QueryRow(ctx, `SELECT status FROM checkouts WHERE checkout_id = $1`, c.CheckoutID).Scan(&status)
	}
	if err != nil {
		return "", fmt.Errorf("record end %s of checkout %s: %w", c.Status, c.CheckoutID, err)
	}
	return status, nil
}

// Outcome is how a checkout that was not confirmed ended (steps.RecordOutcomeInput).
type Outcome struct {
	CheckoutID string
	Status     string
	Reason     string
	ExpiresAt  *time.Time
}

// RecordOutcome writes how a checkout ended, as RecordOutcomeOrEarlier does, for callers
// that do not need the end recorded before.
func (s *Store) RecordOutcome(ctx context.Context, in Outcome) error {
	_, err := s.RecordOutcomeOrEarlier(ctx, in)
	return err
}

// RecordOutcomeOrEarlier writes how a checkout ended and answers nil, or, when the checkout
// had already ended, the checkout with the end Postgres holds. Only the first end is kept: a
// checkout that has ended is never rewritten, so a retry or a late duplicate changes nothing,
// and a saga's run that ends otherwise (support reset it past a confirm, say) learns the end
// that stands. A checkout Postgres never recorded is left unrecorded, and answers nil.
func (s *Store) RecordOutcomeOrEarlier(ctx context.Context, in Outcome) (*shop.CheckoutRecord, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE checkouts SET status = $2, reason = NULLIF($3, ''), expires_at = $4, ended_at = now(), updated_at = now()
		WHERE checkout_id = $1 AND ended_at IS NULL`, in.CheckoutID, in.Status, in.Reason, in.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("record outcome %s of checkout %s: %w", in.Status, in.CheckoutID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	rec, err := s.Checkout(ctx, in.CheckoutID)
	switch {
	case errors.Is(err, shop.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("record outcome %s of checkout %s: %w", in.Status, in.CheckoutID, err)
	}
	return &rec, nil
}

// EndAbandoned records the end of an open checkout whose saga is closed without recording
// one (terminated from the Web UI, reset past its end, timed out, dropped by the server at its
// history limit, or gone with its retention): status failed with reason. Nothing will ever act
// for that saga again, so in the same transaction its successful payments that no order took
// and no refund has are routed to refunds (disposition orphan_refund) and returned, for the
// caller to start their Refund workflows at once; should it fail to, the orphan sweep starts
// those it finds claimed without a refund (ClaimStaleOrphans). A payment arriving later meets
// an ended checkout and is refunded by its webhook. It reports whether the checkout was still
// open; a checkout already ended claims nothing.
func (s *Store) EndAbandoned(ctx context.Context, checkoutID, reason string) (bool, []shop.StaleOrphan, error) {
	var ended bool
	var refunds []shop.StaleOrphan
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE checkouts SET status = 'failed', reason = $2, ended_at = now(), updated_at = now()
			WHERE checkout_id = $1 AND ended_at IS NULL`, checkoutID, reason)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		ended = true
		rows, err := tx.Query(ctx, `
			UPDATE payment_events e SET disposition = $2
			WHERE e.checkout_id = $1 AND e.outcome = 'succeeded' AND e.disposition IN ($3, $4, $5, $6)
				AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.payment_provider = e.provider AND o.payment_ref = e.payment_ref)
				AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.provider = e.provider AND r.payment_ref = e.payment_ref)
			RETURNING provider, event_id, outcome, coalesce(payment_ref, ''), coalesce(amount_cents, 0),
				coalesce(currency, ''), coalesce(checkout_id, '')`,
			checkoutID, shop.DispositionOrphanRefund, shop.DispositionOrphan, shop.DispositionSignalled,
			shop.DispositionMatched, shop.DispositionPending)
		if err != nil {
			return err
		}
		refunds, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (shop.StaleOrphan, error) {
			var o shop.StaleOrphan
			err := row.Scan(&o.Provider, &o.EventID, &o.Outcome, &o.PaymentRef, &o.AmountCents, &o.Currency, &o.CheckoutID)
			return o, err
		})
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("end abandoned checkout %s: %w", checkoutID, err)
	}
	return ended, refunds, nil
}

// OpenCheckouts lists up to limit checkouts still open in Postgres whose id sorts after
// after, in id order: the ones whose saga the reconciler checks, a page at a time.
func (s *Store) OpenCheckouts(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT checkout_id FROM checkouts
		WHERE ended_at IS NULL AND checkout_id > $1
		ORDER BY checkout_id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read open checkouts: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read open checkouts: %w", err)
	}
	return ids, nil
}

// CheckoutEnd is how a checkout ended, as the reconciler reads it; EndedAt is nil while open.
type CheckoutEnd struct {
	Status  string
	EndedAt *time.Time
}

// CheckoutEnds reads how the given checkouts ended; ids Postgres does not know are absent.
func (s *Store) CheckoutEnds(ctx context.Context, ids []string) (map[string]CheckoutEnd, error) {
	rows, err := s.pool.Query(ctx, `SELECT checkout_id, status, ended_at FROM checkouts WHERE checkout_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read checkout ends: %w", err)
	}
	defer rows.Close()
	ends := map[string]CheckoutEnd{}
	for rows.Next() {
		var id string
		var e CheckoutEnd
		if err := rows.Scan(&id, &e.Status, &e.EndedAt); err != nil {
			return nil, fmt.Errorf("read checkout ends: %w", err)
		}
		ends[id] = e
	}
	return ends, rows.Err()
}

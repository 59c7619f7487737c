package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/checkout-saga/checkout-saga/shop"
)

// RecordPaymentEvent stores a verified event once per provider and event id.
func (s *Store) RecordPaymentEvent(ctx context.Context, ev shop.PaymentEvent) (shop.RecordedEvent, error) {
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO payment_events (provider, event_id, event_type, checkout_id, payment_ref, amount_cents, currency, payload, outcome)
		VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6, NULLIF($7, ''), $8, NULLIF($9, ''))
		ON CONFLICT (provider, event_id) DO NOTHING`,
		ev.Provider, ev.EventID, ev.Type, ev.CheckoutID, ev.PaymentRef, ev.AmountCents, ev.Currency, ev.Payload, ev.Outcome)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return shop.RecordedEvent{}, fmt.Errorf("record %s event %q: %w: %w", ev.Provider, ev.EventID, shop.ErrUnstorableEvent, err)
	}
	if err != nil {
		return shop.RecordedEvent{}, fmt.Errorf("record %s event %s: %w", ev.Provider, ev.EventID, err)
	}
	if tag.RowsAffected() == 1 {
		return shop.RecordedEvent{New: true}, nil
	}
	var deliveredAt *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT delivered_at FROM payment_events WHERE provider = $1 AND event_id = $2`,
		ev.Provider, ev.EventID).Scan(&deliveredAt); err != nil {
		return shop.RecordedEvent{}, fmt.Errorf("read %s event %s: %w", ev.Provider, ev.EventID, err)
	}
	return shop.RecordedEvent{Delivered: deliveredAt != nil}, nil
}

// paymentVerifiedSQL is PaymentVerified's question: $1 provider, $2 payment, $3 checkout
// (empty for any), $4 amount, $5 currency, $6 outcome. It reads payment_events by payment
// (payment_events_payment_idx).
const paymentVerifiedSQL = `
	SELECT EXISTS (SELECT 1 FROM payment_events
		WHERE provider = $1 AND payment_ref = $2 AND outcome = $6 AND lower(coalesce(currency, '')) = lower($5)
			AND ($3 = '' AND amount_cents >= $4 OR checkout_id = $3 AND amount_cents = $4))`

// PaymentVerified reports whether a verified event recorded the successful payment ref of
// provider for at least amountCents in currency: a webhook whose signature the API checked,
// or a payment the provider itself listed to reconciliation. With checkoutID, the event must
// be for that checkout and of exactly that amount. Payment events are only ever added, so
// the answer cannot be taken back.
func (s *Store) PaymentVerified(ctx context.Context, provider, paymentRef, checkoutID string, amountCents int64, currency string) (bool, error) {
	return s.PaymentOutcomeVerified(ctx, provider, paymentRef, checkoutID, shop.PaymentSucceeded, amountCents, currency)
}

// PaymentOutcomeVerified is PaymentVerified's question for any outcome: whether a verified
// event recorded that payment ref of provider with outcome (succeeded, failed, canceled), of
// amountCents in currency (at least, without checkoutID).
func (s *Store) PaymentOutcomeVerified(ctx context.Context, provider, paymentRef, checkoutID string, outcome shop.PaymentKind, amountCents int64, currency string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, paymentVerifiedSQL, provider, paymentRef, checkoutID, amountCents, currency, string(outcome)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read the %s events of %s payment %s: %w", outcome, provider, paymentRef, err)
	}
	return ok, nil
}

// PurgePaymentPayloads empties the raw body of every payment event received more than
// retention ago, in batches, and returns how many it emptied. A provider's event can carry a
// buyer's email, name, address or card details; the product reads only the columns it
// copied out of it (type, checkout, payment, amount, currency, outcome), which stay.
func (s *Store) PurgePaymentPayloads(ctx context.Context, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `
			UPDATE payment_events SET payload = '{}'::jsonb WHERE (provider, event_id) IN (
				SELECT provider, event_id FROM payment_events
				WHERE received_at < now() - make_interval(secs => $1) AND payload <> '{}'::jsonb LIMIT $2)`,
			retention.Seconds(), pruneBatch)
		if err != nil {
			return total, fmt.Errorf("purge payment payloads older than %s: %w", retention, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
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

// queueMatchOrphans queues the claim of the payment events recorded for a checkout that its
// saga has not been told about, into found: webhooks that came before the checkout existed
// (disposition orphan), and any still being handled (pending; the saga ignores the second
// delivery by event id). Claiming sets the disposition to matched, so the orphan sweeper
// never refunds a payment a saga has; a retried call claims the same events again.
// InsertCheckout runs it in the transaction that records the checkout.
func queueMatchOrphans(b *pgx.Batch, checkoutID string, found *[]shop.RecordedPayment) {
	b.Queue(`
		UPDATE payment_events SET disposition = $2
		WHERE checkout_id = $1 AND outcome IS NOT NULL AND disposition IN ($2, $3, $4)
		RETURNING provider, event_id, outcome, coalesce(payment_ref, ''), coalesce(amount_cents, 0), coalesce(currency, '')`,
		checkoutID, shop.DispositionMatched, shop.DispositionOrphan, shop.DispositionPending).
		Query(func(rows pgx.Rows) error {
			payments, err := pgx.CollectRows(rows, pgx.RowToStructByPos[shop.RecordedPayment])
			if err != nil {
				return fmt.Errorf("match orphan payments of checkout %s: %w", checkoutID, err)
			}
			*found = payments
			return nil
		})
}

// ClaimStaleOrphans marks successful orphan payments that no open checkout claimed for
// olderThanSeconds (see EndAbandoned for those of a checkout that ended) as being refunded (disposition orphan_refund) and returns at most limit
// of them, with those a sweep claimed before but never recorded a refund for. The claim and
// a checkout's own claim (queueMatchOrphans) update the same row, so Postgres lets exactly one of
// them have it: a payment is either refunded or kept by its checkout, never both.
func (s *Store) ClaimStaleOrphans(ctx context.Context, olderThanSeconds int64, limit int) ([]shop.StaleOrphan, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE payment_events e SET disposition = $3
		WHERE (provider, event_id) IN (
			SELECT provider, event_id FROM payment_events o
			WHERE o.outcome = 'succeeded' AND (
				-- an orphan no live checkout claimed in time (none has its id, or it ended
				-- without taking it: a saga terminated, or dropped by the server), that
				-- neither paid an order nor was refunded already
				o.disposition = $2 AND o.received_at < now() - make_interval(secs => $1)
					AND NOT EXISTS (SELECT 1 FROM checkouts c WHERE c.checkout_id = o.checkout_id AND c.ended_at IS NULL)
					AND NOT EXISTS (SELECT 1 FROM orders r WHERE r.payment_provider = o.provider AND r.payment_ref = o.payment_ref)
					AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.provider = o.provider AND r.payment_ref = o.payment_ref)
				-- or one claimed by a sweep that ended before its refund was recorded
				OR o.disposition = $3 AND NOT EXISTS (
					SELECT 1 FROM refunds r WHERE r.provider = o.provider AND r.payment_ref = o.payment_ref))
			ORDER BY o.received_at LIMIT $4)
			AND (e.disposition = $3 OR e.disposition = $2
				AND NOT EXISTS (SELECT 1 FROM checkouts c WHERE c.checkout_id = e.checkout_id AND c.ended_at IS NULL))
		RETURNING provider, event_id, outcome, coalesce(payment_ref, ''), coalesce(amount_cents, 0),
			coalesce(currency, ''), coalesce(checkout_id, '')`,
		olderThanSeconds, shop.DispositionOrphan, shop.DispositionOrphanRefund, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("claim stale orphan payments: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (shop.StaleOrphan, error) {
		var o shop.StaleOrphan
		err := row.Scan(&o.Provider, &o.EventID, &o.Outcome, &o.PaymentRef, &o.AmountCents, &o.Currency, &o.CheckoutID)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim stale orphan payments: %w", err)
	}
	return claimed, nil
}

// PaymentFates tells which of refs, payments of checkoutID at provider, Postgres has already
// given an end (shop.PaymentFates). Every record of a payment carries the checkout its
// provider's metadata names, the one the provider was searched by, so each lookup goes
// through its table's checkout index.
func (s *Store) PaymentFates(ctx context.Context, provider, checkoutID string, refs []string) (shop.PaymentFates, error) {
	var fates shop.PaymentFates
	if len(refs) == 0 {
		return fates, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT p.ref,
			EXISTS (SELECT 1 FROM refunds r
					WHERE r.checkout_id = $2 AND r.provider = $1 AND r.payment_ref = p.ref)
				OR EXISTS (SELECT 1 FROM payment_events e
					WHERE e.checkout_id = $2 AND e.provider = $1 AND e.payment_ref = p.ref AND e.disposition IN ($4, $5)),
			EXISTS (SELECT 1 FROM orders o
				WHERE o.checkout_id = $2 AND o.payment_provider = $1 AND o.payment_ref = p.ref)
		FROM unnest($3::text[]) AS p(ref)
		ORDER BY p.ref`,
		provider, checkoutID, refs, shop.DispositionOrphanRefund, shop.DispositionLate)
	if err != nil {
		return fates, fmt.Errorf("read fates of %s payments of checkout %s: %w", provider, checkoutID, err)
	}
	var ref string
	var refunding, ordered bool
	_, err = pgx.ForEachRow(rows, []any{&ref, &refunding, &ordered}, func() error {
		if refunding {
			fates.Refunding = append(fates.Refunding, ref)
		}
		if ordered {
			fates.Ordered = append(fates.Ordered, ref)
		}
		return nil
	})
	if err != nil {
		return fates, fmt.Errorf("read fates of %s payments of checkout %s: %w", provider, checkoutID, err)
	}
	return fates, nil
}

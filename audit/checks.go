package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// succeededEventTypes are the payment_events.event_type values of a successful payment:
// Stripe's (api/webhooks.go) and Standard Webhooks' (api/standardwebhooks.go).
var succeededEventTypes = []string{"payment_intent.succeeded", "payment.succeeded"}

// payments: every successful payment, orphans included, ends as exactly one order (orders by
// payment_provider + payment_ref) or one refund (refunds by provider + payment_ref, whatever
// the refund's status: a stuck refund is flagged in Temporal with NeedsAttention). A payment is
// judged once its first event is older than the grace, so a saga confirming it now is not a
// violation. Reads payment_events, orders, refunds.
func (a *Auditor) payments(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		WITH paid AS (
			SELECT provider, coalesce(payment_ref, '') AS payment_ref,
				array_agg(event_id ORDER BY event_id) AS event_ids,
				coalesce(min(checkout_id), '') AS checkout_id, min(received_at) AS first_received
			FROM payment_events WHERE event_type = ANY($1) OR outcome = 'succeeded'
			GROUP BY provider, coalesce(payment_ref, '')
		), o AS (
			SELECT payment_provider AS provider, payment_ref, array_agg(order_id ORDER BY order_id) AS order_ids
			FROM orders GROUP BY 1, 2
		), r AS (
			SELECT provider, payment_ref, array_agg(refund_key ORDER BY refund_key) AS refund_keys
			FROM refunds GROUP BY 1, 2
		)
		SELECT paid.provider, paid.payment_ref, paid.event_ids, paid.checkout_id,
			coalesce(o.order_ids, '{}'), coalesce(r.refund_keys, '{}')
		FROM paid LEFT JOIN o USING (provider, payment_ref) LEFT JOIN r USING (provider, payment_ref)
		WHERE paid.first_received < now() - make_interval(secs => $2)
			AND (paid.payment_ref = '' OR cardinality(coalesce(o.order_ids, '{}')) + cardinality(coalesce(r.refund_keys, '{}')) <> 1)
		ORDER BY 1, 2`, succeededEventTypes, a.graceSeconds())
	if err != nil {
		return nil, fmt.Errorf("read successful payments: %w", err)
	}
	var vs []shop.AuditViolation
	var ids shop.AuditIDs
	var orders []string
	_, err = pgx.ForEachRow(rows, []any{&ids.Provider, &ids.PaymentRef, &ids.EventIDs, &ids.CheckoutID, &orders, &ids.RefundKeys}, func() error {
		v := shop.AuditViolation{Check: CheckPayments, AuditIDs: ids}
		v.AuditIDs.EventIDs = append([]string(nil), ids.EventIDs...)
		v.AuditIDs.RefundKeys = append([]string(nil), ids.RefundKeys...)
		if len(orders) > 0 {
			v.OrderID = strings.Join(orders, ",")
		}
		if v.CheckoutID != "" {
			v.WorkflowID = shop.WorkflowID(v.CheckoutID)
		}
		switch {
		case ids.PaymentRef == "":
			v.Detail = fmt.Sprintf("a successful %s payment (events %s) was recorded without a payment ref: it cannot be matched to an order or refunded",
				ids.Provider, strings.Join(ids.EventIDs, ", "))
		case len(orders)+len(ids.RefundKeys) == 0:
			v.Detail = fmt.Sprintf("successful %s payment %s (checkout %q) has no order and no refund: the money is kept",
				ids.Provider, ids.PaymentRef, ids.CheckoutID)
		default:
			v.Detail = fmt.Sprintf("successful %s payment %s (checkout %q) has %d orders and %d refunds, want exactly one of either",
				ids.Provider, ids.PaymentRef, ids.CheckoutID, len(orders), len(ids.RefundKeys))
		}
		vs = append(vs, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read successful payments: %w", err)
	}
	return vs, nil
}

// verifiedOrders: every order's payment (payment_provider + payment_ref) was recorded by a
// successful payment event of its checkout, for its amount. The store confirms nothing else
// (store.ConfirmOrder); an order without one was written around it (a forged payment
// on a product from before that check, or a direct write). Reads orders, payment_events.
func (a *Auditor) verifiedOrders(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT o.order_id, o.checkout_id, o.payment_provider, o.payment_ref FROM orders o
		WHERE NOT EXISTS (SELECT 1 FROM payment_events e
			WHERE e.provider = o.payment_provider AND e.payment_ref = o.payment_ref AND e.outcome = 'succeeded'
				AND e.checkout_id = o.checkout_id AND e.amount_cents = o.amount_cents)
		ORDER BY o.order_id`)
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	var vs []shop.AuditViolation
	var orderID, checkoutID, provider, ref string
	_, err = pgx.ForEachRow(rows, []any{&orderID, &checkoutID, &provider, &ref}, func() error {
		vs = append(vs, shop.AuditViolation{Check: CheckVerifiedOrders,
			Detail: fmt.Sprintf("order %s of checkout %s was paid by %s payment %s, which no verified event recorded for it: goods for money nobody saw",
				orderID, checkoutID, provider, ref),
			AuditIDs: shop.AuditIDs{CheckoutID: checkoutID, WorkflowID: shop.WorkflowID(checkoutID), OrderID: orderID, Provider: provider, PaymentRef: ref}})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	return vs, nil
}

// ledger: per SKU, on_hand is the sum of the ledger's delta_on_hand and sold the sum of its
// delta_sold, so on_hand + sold is the sum of every change ever made. Every write of either
// column appends its ledger row in the same transaction, so no grace is needed. Reads skus,
// inventory_ledger.
func (a *Auditor) ledger(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT s.sku, s.on_hand, s.sold, coalesce(l.on_hand, 0), coalesce(l.sold, 0)
		FROM skus s LEFT JOIN (
			SELECT sku, sum(delta_on_hand) AS on_hand, sum(delta_sold) AS sold FROM inventory_ledger GROUP BY sku
		) l USING (sku)
		WHERE s.on_hand <> coalesce(l.on_hand, 0) OR s.sold <> coalesce(l.sold, 0)
		ORDER BY s.sku`)
	if err != nil {
		return nil, fmt.Errorf("read skus and ledger: %w", err)
	}
	var vs []shop.AuditViolation
	var sku string
	var onHand, sold, ledgerOnHand, ledgerSold int64
	_, err = pgx.ForEachRow(rows, []any{&sku, &onHand, &sold, &ledgerOnHand, &ledgerSold}, func() error {
		vs = append(vs, shop.AuditViolation{Check: CheckLedger, AuditIDs: shop.AuditIDs{SKU: sku}, Detail: fmt.Sprintf(
			"sku %s has on_hand %d and sold %d (total %d), but its ledger sums to on_hand %d and sold %d (total %d)",
			sku, onHand, sold, onHand+sold, ledgerOnHand, ledgerSold, ledgerOnHand+ledgerSold)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read skus and ledger: %w", err)
	}
	return vs, nil
}

// endedHolds: every live hold (holds:{sku} in Redis, for each SKU in Postgres) belongs to a
// checkout Postgres knows (the saga records its checkout before it reserves) that has not
// ended (checkouts.ended_at), or that ended less than the grace ago (its release or commit is
// on its way). Reads skus, checkouts; Redis holds:{sku}.
func (a *Auditor) endedHolds(ctx context.Context) ([]shop.AuditViolation, error) {
	skus, err := a.skus(ctx)
	if err != nil {
		return nil, err
	}
	type hold struct {
		sku string
		lua.Hold
	}
	var holds []hold
	var ids []string
	for _, sku := range skus {
		hs, err := a.stock.Holds(ctx, sku)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			holds = append(holds, hold{sku, h})
			ids = append(ids, h.CheckoutID)
		}
	}
	if len(holds) == 0 {
		return nil, nil
	}
	rows, err := a.pool.Query(ctx, `
		SELECT checkout_id, status, coalesce(ended_at < now() - make_interval(secs => $2), false)
		FROM checkouts WHERE checkout_id = ANY($1)`, ids, a.graceSeconds())
	if err != nil {
		return nil, fmt.Errorf("read checkouts of live holds: %w", err)
	}
	type record struct {
		status string
		ended  bool // ended longer than the grace ago
	}
	records := map[string]record{}
	var id string
	var r record
	if _, err := pgx.ForEachRow(rows, []any{&id, &r.status, &r.ended}, func() error { records[id] = r; return nil }); err != nil {
		return nil, fmt.Errorf("read checkouts of live holds: %w", err)
	}
	var vs []shop.AuditViolation
	for _, h := range holds {
		v := shop.AuditViolation{Check: CheckEndedHolds, AuditIDs: shop.AuditIDs{SKU: h.sku, CheckoutID: h.CheckoutID, WorkflowID: shop.WorkflowID(h.CheckoutID)}}
		if r, known := records[h.CheckoutID]; known && r.ended {
			v.Detail = fmt.Sprintf("checkout %s ended %s but still holds %d x %s in Redis", h.CheckoutID, r.status, h.Quantity, h.sku)
		} else if !known {
			v.Detail = fmt.Sprintf("Redis holds %d x %s for checkout %s, which Postgres does not know", h.Quantity, h.sku, h.CheckoutID)
		} else {
			continue
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// sagas: every open checkout (checkouts.ended_at IS NULL) created more than the grace ago has
// its saga, workflow checkout-<id>, running in Temporal. A saga that closed without Postgres
// learning its end, or one Temporal never had or dropped, leaves the checkout (and any hold or
// payment of it) with nobody to finish it. Reads checkouts; Temporal DescribeWorkflowExecution.
func (a *Auditor) sagas(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT checkout_id FROM checkouts
		WHERE ended_at IS NULL AND created_at < now() - make_interval(secs => $1)
		ORDER BY checkout_id`, a.graceSeconds())
	if err != nil {
		return nil, fmt.Errorf("read open checkouts: %w", err)
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read open checkouts: %w", err)
	}
	var vs []shop.AuditViolation
	for _, id := range open {
		wid := shop.WorkflowID(id)
		resp, err := a.temporal.DescribeWorkflowExecution(ctx, wid, "")
		var notFound *serviceerror.NotFound
		detail := ""
		switch {
		case errors.As(err, &notFound):
			detail = fmt.Sprintf("checkout %s is open in Postgres but Temporal has no saga %s", id, wid)
		case err != nil:
			return nil, fmt.Errorf("describe saga %s: %w", wid, err)
		default:
			if st := resp.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				detail = fmt.Sprintf("checkout %s is open in Postgres but its saga %s is %s", id, wid, strings.ToLower(st.String()))
			}
		}
		if detail != "" {
			vs = append(vs, shop.AuditViolation{Check: CheckSagas, Detail: detail, AuditIDs: shop.AuditIDs{CheckoutID: id, WorkflowID: wid}})
		}
	}
	return vs, nil
}

// confirmedHolds: no hold of a confirmed order (orders, order_lines) was released: its
// hold-ends:{sku} marker is never "released". And once the order is older than the
// grace its hold has ended: holds:{sku} no longer lists the checkout (the commit ran). Only
// orders younger than the tombstone TTL can still be judged; older tombstones have expired.
// Reads orders, order_lines; Redis hold-ends:{sku} and holds:{sku}.
func (a *Auditor) confirmedHolds(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT o.order_id, o.checkout_id, l.sku, o.created_at < now() - make_interval(secs => $2)
		FROM orders o JOIN order_lines l USING (order_id)
		WHERE o.created_at > now() - make_interval(secs => $1)
		ORDER BY o.order_id, l.sku`, lua.DefaultTombstoneTTL.Seconds(), a.graceSeconds())
	if err != nil {
		return nil, fmt.Errorf("read confirmed orders: %w", err)
	}
	type line struct {
		orderID, checkoutID, sku string
		judged                   bool // older than the grace
		end                      *redis.StringCmd
		live                     *redis.BoolCmd
	}
	lines, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*line, error) {
		l := &line{}
		return l, r.Scan(&l.orderID, &l.checkoutID, &l.sku, &l.judged)
	})
	if err != nil {
		return nil, fmt.Errorf("read confirmed orders: %w", err)
	}
	const batch = 500
	for start := 0; start < len(lines); start += batch {
		pipe := a.rdb.Pipeline()
		for _, l := range lines[start:min(start+batch, len(lines))] {
			l.end = pipe.HGet(ctx, lua.HoldEndsKey(l.sku), l.checkoutID)
			l.live = pipe.HExists(ctx, lua.HoldsKey(l.sku), l.checkoutID)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read holds of confirmed orders: %w", err)
		}
	}
	var vs []shop.AuditViolation
	for _, l := range lines {
		ids := shop.AuditIDs{OrderID: l.orderID, CheckoutID: l.checkoutID, WorkflowID: shop.WorkflowID(l.checkoutID), SKU: l.sku}
		if end, _ := l.end.Result(); lua.HoldEndOutcome(end) == "released" {
			vs = append(vs, shop.AuditViolation{Check: CheckConfirmedHolds, AuditIDs: ids, Detail: fmt.Sprintf(
				"order %s of checkout %s is confirmed but its hold on %s was released: the units it sold went back to stock",
				l.orderID, l.checkoutID, l.sku)})
		} else if live, _ := l.live.Result(); live && l.judged {
			vs = append(vs, shop.AuditViolation{Check: CheckConfirmedHolds, AuditIDs: ids, Detail: fmt.Sprintf(
				"order %s of checkout %s is confirmed but its hold on %s is still live: the commit never ran",
				l.orderID, l.checkoutID, l.sku)})
		}
	}
	return vs, nil
}

// stockAtRest: for each SKU with no checkout in flight (none open, none ended within the grace)
// and no stock change within the grace, Redis agrees with Postgres: available + held ==
// on_hand, and held is the sum of the live holds. A SKU Redis does not have is skipped: Redis
// lost it, and the next reserve rebuilds it from Postgres. SKUs with checkouts in flight are
// not judged, because a confirm lowers on_hand in Postgres a moment before its commit lowers
// held in Redis. Reads skus, checkout_items, checkouts; Redis stock:{sku} and holds:{sku}.
func (a *Auditor) stockAtRest(ctx context.Context) ([]shop.AuditViolation, error) {
	rows, err := a.pool.Query(ctx, `
		SELECT s.sku, s.on_hand FROM skus s
		WHERE s.updated_at < now() - make_interval(secs => $1)
			AND NOT EXISTS (
				SELECT 1 FROM checkout_items ci JOIN checkouts c USING (checkout_id)
				WHERE ci.sku = s.sku AND (c.ended_at IS NULL OR c.ended_at > now() - make_interval(secs => $1)))
		ORDER BY s.sku`, a.graceSeconds())
	if err != nil {
		return nil, fmt.Errorf("read skus at rest: %w", err)
	}
	type sku struct { // exported fields: pgx fills them by position
		Name   string
		OnHand int64
	}
	skus, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sku])
	if err != nil {
		return nil, fmt.Errorf("read skus at rest: %w", err)
	}
	var vs []shop.AuditViolation
	for _, s := range skus {
		level, err := a.stock.Level(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		if !level.Stocked {
			continue
		}
		holds, err := a.stock.Holds(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		var inHolds int64
		for _, h := range holds {
			inHolds += h.Quantity
		}
		if level.Available+level.Held != s.OnHand || level.Held != inHolds {
			vs = append(vs, shop.AuditViolation{Check: CheckStockAtRest, AuditIDs: shop.AuditIDs{SKU: s.Name}, Detail: fmt.Sprintf(
				"sku %s at rest: Redis has available %d + held %d = %d and %d units in live holds, Postgres has on_hand %d",
				s.Name, level.Available, level.Held, level.Available+level.Held, inHolds, s.OnHand)})
		}
	}
	return vs, nil
}

// skus lists every SKU Postgres knows.
func (a *Auditor) skus(ctx context.Context) ([]string, error) {
	rows, err := a.pool.Query(ctx, `SELECT sku FROM skus ORDER BY sku`)
	if err != nil {
		return nil, fmt.Errorf("read skus: %w", err)
	}
	skus, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read skus: %w", err)
	}
	return skus, nil
}

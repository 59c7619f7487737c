package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// An operator's change of on_hand runs in three steps, so that Redis never runs ahead of
// Postgres in the direction that oversells and no Postgres lock is held across a Redis call:
//
//  1. stage it in Redis as a hold named after the change (lua.Stock.StageChange): a decrease
//     takes its units out of available at once (refused if fewer are not held), an increase
//     is counted as held until Postgres has the units;
//  2. write it to Postgres in one transaction: on_hand, the ledger row and the
//     stock_changes row (with a compare-and-set on the version for a PUT);
//  3. finish it in Redis: commit a decrease's hold, release an increase's into available.
//
// If step 2 refuses, step 3 undoes the stage instead (release a decrease, forfeit an
// increase). If the process dies or Redis fails between the steps, the reconciler finds the
// change's hold and finishes it from stock_changes, or undoes it when Postgres never
// recorded it (FinishChange).

// StockChange is step 2's input.
type StockChange struct {
	ID     string
	SKU    string
	Delta  int64
	Reason string
	// Set is a PUT's new row; nil for an adjustment, which only adds Delta.
	Set *shop.Product
	// Version is the row version a PUT computed Delta from; the write happens only if the
	// row is still at it.
	Version        int64
	IdempotencyKey string
	RequestHash    string
}

// NewChangeID names a change: its direction (so the reconciler can undo it without
// Postgres), when it started (so the reconciler leaves a change in flight alone) and 8
// random bytes.
func NewChangeID(delta int64) string {
	dir := "i"
	if delta < 0 {
		dir = "d"
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return dir + strconv.FormatInt(time.Now().UnixMilli(), 10) + "-" + hex.EncodeToString(b)
}

// parseChangeID returns a change id's direction (-1 decrease, +1 increase) and start.
func parseChangeID(id string) (dir int, started time.Time, ok bool) {
	if len(id) < 3 || (id[0] != 'i' && id[0] != 'd') {
		return 0, time.Time{}, false
	}
	dash := 1
	for dash < len(id) && id[dash] != '-' {
		dash++
	}
	ms, err := strconv.ParseInt(id[1:dash], 10, 64)
	if err != nil {
		return 0, time.Time{}, false
	}
	dir = 1
	if id[0] == 'd' {
		dir = -1
	}
	return dir, time.UnixMilli(ms), true
}

// ErrKeyTaken means another change already holds the idempotency key.
var ErrKeyTaken = errors.New("idempotency key already used")

// ApplyChange is step 2. It reports false, changing nothing, when a PUT's row is no longer
// at the version it read.
func (s *Store) ApplyChange(ctx context.Context, ch StockChange) (bool, error) {
	applied := true
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var tag pgconn.CommandTag
		var err error
		if p := ch.Set; p != nil {
			tag, err = tx.Exec(ctx, `
				UPDATE skus SET on_hand = on_hand + $2, price_cents = $3, currency = $4, max_per_order = $5, max_per_customer = $7,
					sale_starts_at = $8, updated_at = now()
				WHERE sku = $1 AND version = $6`, ch.SKU, ch.Delta, p.PriceCents, p.Currency, p.MaxPerOrder, ch.Version, p.MaxPerCustomer, p.SaleStartsAt)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE skus SET on_hand = on_hand + $2, updated_at = now() WHERE sku = $1`, ch.SKU, ch.Delta)
		}
		if err != nil {
			return fmt.Errorf("write sku: %w", err)
		}
		if tag.RowsAffected() == 0 {
			applied = false
			return nil
		}
		if ch.Delta != 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ($1, $2, 0, $3)`,
				ch.SKU, ch.Delta, ch.Reason); err != nil {
				return fmt.Errorf("append ledger: %w", err)
			}
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO stock_changes (change_id, sku, delta_on_hand, reason, idempotency_key, request_hash)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, ''))`,
			ch.ID, ch.SKU, ch.Delta, ch.Reason, ch.IdempotencyKey, ch.RequestHash)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "stock_changes_idempotency_key_key" {
			return ErrKeyTaken
		}
		if err != nil {
			return fmt.Errorf("record change: %w", err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("change on hand of %s by %+d: %w", ch.SKU, ch.Delta, err)
	}
	return applied, nil
}

// KeyedChange is what Postgres knows of an adjustment's idempotency key.
type KeyedChange struct {
	Found       bool
	RequestHash string
	Response    []byte // nil until the first answer was stored
}

// ChangeByKey reads the stock change an adjustment's idempotency key names, if any.
func (s *Store) ChangeByKey(ctx context.Context, key string) (KeyedChange, error) {
	var k KeyedChange
	var hash *string
	err := s.pool.QueryRow(ctx, `SELECT request_hash, response FROM stock_changes WHERE idempotency_key = $1`, key).Scan(&hash, &k.Response)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, nil
	}
	if err != nil {
		return k, fmt.Errorf("read stock change of idempotency key %q: %w", key, err)
	}
	k.Found = true
	if hash != nil {
		k.RequestHash = *hash
	}
	return k, nil
}

// StoreChangeResponse keeps the answer to a stock change, for its retries to answer the same.
func (s *Store) StoreChangeResponse(ctx context.Context, changeID string, response []byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE stock_changes SET response = $2 WHERE change_id = $1`, changeID, response); err != nil {
		return fmt.Errorf("store the answer to stock change %s: %w", changeID, err)
	}
	return nil
}

// FinishChange is the reconciler's step 3 for a change whose hold it found in Redis: finish
// it if Postgres recorded it, undo it if Postgres did not and it started more than grace ago
// (an operator request is long over by then), leave it otherwise. It returns a note for the
// ledger and the run's corrections, or "".
func (s *Store) FinishChange(ctx context.Context, stock *lua.Stock, sku, changeID string, grace time.Duration) (string, error) {
	holder := lua.ChangeHoldID(changeID)
	var delta int64
	err := s.pool.QueryRow(ctx, `SELECT delta_on_hand FROM stock_changes WHERE change_id = $1`, changeID).Scan(&delta)
	recorded := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read stock change %s: %w", changeID, err)
	}
	dir, started, ok := parseChangeID(changeID)
	var note string
	switch {
	case recorded && delta < 0:
		_, err = stock.Commit(ctx, sku, holder)
		note = fmt.Sprintf("reconcile: finished stock change %s of %s (%+d), whose redis step had not run", changeID, sku, delta)
	case recorded:
		_, err = stock.Release(ctx, sku, holder)
		note = fmt.Sprintf("reconcile: finished stock change %s of %s (%+d), whose redis step had not run", changeID, sku, delta)
	case !ok || time.Since(started) < grace:
		return "", nil // in flight (or not ours to judge)
	case dir < 0:
		_, err = stock.Release(ctx, sku, holder)
		note = fmt.Sprintf("reconcile: undid stock change %s of %s, which postgres never recorded", changeID, sku)
	default:
		_, err = stock.Forfeit(ctx, sku, holder)
		note = fmt.Sprintf("reconcile: undid stock change %s of %s, which postgres never recorded", changeID, sku)
	}
	if err != nil {
		return "", fmt.Errorf("reconcile stock change %s of %s: %w", changeID, sku, err)
	}
	if err := s.LedgerNote(ctx, sku, "", note); err != nil {
		return "", err
	}
	return note, nil
}

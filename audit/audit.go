// Package audit checks the product's promises (docs/contract.md, "What the product
// promises") across the three stores at once: Postgres (the record), Redis (the holds) and
// Temporal (the running sagas). It reads only; it never repairs. Each violation names the ids
// support needs to act on it.
//
// Each check is one small function over today's schema (migrations/) and key layout
// (lua/doc.go), so a change to either changes one function. Keys are built only by package
// lua's key functions.
//
// Checks that look at work in flight skip what is younger than Options.Grace: a payment whose
// saga is confirming it, a checkout whose saga is starting, a stock level while a commit is on
// its way. At rest (after a sale, at the end of a test) every check is exact.
package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Names of the checks, as they appear in Violation.Check.
const (
	// CheckPayments: every successful payment ends as exactly one order or one refund.
	CheckPayments = "payment_order_or_refund"
	// CheckLedger: per SKU, on_hand and sold are the sums of the ledger's changes.
	CheckLedger = "ledger"
	// CheckEndedHolds: no live hold belongs to a checkout that ended (or that Postgres does
	// not know).
	CheckEndedHolds = "hold_of_ended_checkout"
	// CheckSagas: every open checkout has its saga running in Temporal.
	CheckSagas = "open_checkout_without_saga"
	// CheckConfirmedHolds: no confirmed order's hold was released.
	CheckConfirmedHolds = "confirmed_order_released_hold"
	// CheckStockAtRest: per SKU with no checkout in flight, Redis's available + held equals
	// Postgres's on_hand and held equals the live holds.
	CheckStockAtRest = "stock_at_rest"
	// CheckVerifiedOrders: every order was paid by a payment that a verified event recorded
	// for its checkout (a webhook whose signature was checked, or the provider's listing).
	CheckVerifiedOrders = "order_without_verified_payment"
)

// Checks lists every check in the order Run runs them.
var Checks = []string{CheckPayments, CheckVerifiedOrders, CheckLedger, CheckEndedHolds, CheckSagas, CheckConfirmedHolds, CheckStockAtRest}

// DefaultGrace is how long work in flight is left alone: far longer than a confirm, a start or
// a commit takes (milliseconds), and than their retries ride out a blip (the saga's step
// budgets are about two to three minutes).
const DefaultGrace = 5 * time.Minute

// Options change what Run looks at.
type Options struct {
	// Grace: payments, checkouts and stock changes younger than this are not judged yet.
	// Zero means DefaultGrace; a negative value judges everything at once (tests at rest).
	Grace time.Duration
}

// Auditor runs the checks. It needs only read access to each store.
type Auditor struct {
	pool     *pgxpool.Pool
	rdb      redis.Cmdable
	stock    *lua.Stock
	temporal client.Client
	grace    time.Duration
}

// New returns an auditor over the product's stores. rdb is the Redis the stock scripts use.
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, temporal client.Client, opts Options) *Auditor {
	grace := opts.Grace
	switch {
	case grace == 0:
		grace = DefaultGrace
	case grace < 0:
		grace = 0
	}
	return &Auditor{pool: pool, rdb: rdb, stock: lua.New(rdb), temporal: temporal, grace: grace}
}

// Run runs every check. A check that cannot run is listed in the report's Errors and returned
// joined as the error; the other checks still run, so one store down hides nothing else.
func (a *Auditor) Run(ctx context.Context) (shop.AuditReport, error) {
	rep := shop.AuditReport{CheckedAt: time.Now().UTC(), Checks: Checks, Violations: []shop.AuditViolation{}}
	checks := map[string]func(context.Context) ([]shop.AuditViolation, error){
		CheckPayments:       a.payments,
		CheckVerifiedOrders: a.verifiedOrders,
		CheckLedger:         a.ledger,
		CheckEndedHolds:     a.endedHolds,
		CheckSagas:          a.sagas,
		CheckConfirmedHolds: a.confirmedHolds,
		CheckStockAtRest:    a.stockAtRest,
	}
	var errs []error
	for _, name := range Checks {
		vs, err := checks[name](ctx)
		if err != nil {
			err = fmt.Errorf("check %s: %w", name, err)
			errs = append(errs, err)
			rep.Errors = append(rep.Errors, shop.AuditCheckError{Check: name, Error: err.Error()})
			continue
		}
		rep.Violations = append(rep.Violations, vs...)
	}
	return rep, errors.Join(errs...)
}

// graceSeconds is the grace as a Postgres interval in seconds: ages are computed by
// Postgres's clock against its own timestamps, never against this process's clock.
func (a *Auditor) graceSeconds() float64 { return a.grace.Seconds() }

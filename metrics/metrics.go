// Package metrics holds the product's own Prometheus counters. They live in the default
// registry beside the Temporal SDK's metrics, so one /metrics endpoint serves both.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// Holds counts units newly held in Redis (a retried reserve that found its hold is not counted).
	Holds = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "checkout_stock_holds_units_total",
		Help: "Units newly held in Redis for a checkout.",
	}, []string{"sku"})

	// Releases counts units returned to stock by compensation, by why the checkout ended.
	Releases = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "checkout_stock_releases_units_total",
		Help: "Units released back to stock by a checkout that did not complete.",
	}, []string{"sku", "reason"})

	// Confirmations counts orders confirmed in Postgres (once per checkout).
	Confirmations = promauto.NewCounter(prometheus.CounterOpts{
		Name: "checkout_orders_confirmed_total",
		Help: "Orders confirmed in Postgres.",
	})

	// SoldOut counts checkout requests answered 409 out_of_stock.
	SoldOut = promauto.NewCounter(prometheus.CounterOpts{
		Name: "checkout_sold_out_answers_total",
		Help: "Checkout requests answered 409 out_of_stock.",
	})

	// Shed counts checkout requests refused with 503 by admission control.
	Shed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "checkout_requests_shed_total",
		Help: "Checkout requests answered 503 because too many checkouts were starting at once.",
	})

	// Outcomes counts finished checkouts by their final state.
	Outcomes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "checkout_outcomes_total",
		Help: "Checkouts that reached an end state, by state.",
	}, []string{"status"})

	// OrphanPayments counts payment events acknowledged for a checkout that did not exist
	// yet. Most are claimed by their checkout within seconds; the rest are refunded by the
	// orphan sweeper. A rising rate means clients pay before they check out.
	OrphanPayments = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "checkout_orphan_payments_total",
		Help: "Payment events acknowledged for a checkout that did not exist yet, by provider and outcome.",
	}, []string{"provider", "outcome"})
)

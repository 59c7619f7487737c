// Package metrics holds the product's own Prometheus counters. They live in the default
// registry beside the Temporal SDK's metrics, so one /metrics endpoint serves both.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// Holds counts units newly held in Redis (a retried reserve that found its hold is not counted).
	Holds = counterVec("checkout_stock_holds_units_total", "Units newly held in Redis for a checkout.", "sku")

	// Releases counts units returned to stock by compensation, by why the checkout ended.
	Releases = counterVec("checkout_stock_releases_units_total", "Units released back to stock by a checkout that did not complete.", "sku", "reason")

	// Confirmations counts orders confirmed in Postgres (once per checkout).
	Confirmations = counter("checkout_orders_confirmed_total", "Orders confirmed in Postgres.")

	// SoldOut counts checkout requests answered 409 out_of_stock.
	SoldOut = counter("checkout_sold_out_answers_total", "Checkout requests answered 409 out_of_stock.")

	// Shed counts checkout requests refused with 503 by admission control.
	Shed = counter("checkout_requests_shed_total", "Checkout requests answered 503 because too many checkouts were starting at once.")

	// Outcomes counts finished checkouts by their final state.
	Outcomes = counterVec("checkout_outcomes_total", "Checkouts that reached an end state, by state.", "status")

	// OrphanPayments counts payment events acknowledged for a checkout that did not exist
	// yet. Most are claimed by their checkout within seconds; the rest are refunded by the
	// orphan sweeper. A rising rate means clients pay before they check out.
	OrphanPayments = counterVec("checkout_orphan_payments_total", "Payment events acknowledged for a checkout that did not exist yet, by provider and outcome.", "provider", "outcome")
	// RateLimitsCountedLocally counts rate limit checks an API process counted in its own
	// memory because the limiter's Redis did not answer: while it rises, each limit holds
	// per process, not across replicas.
	RateLimitsCountedLocally = counter("checkout_rate_limits_counted_locally_total", "Rate limit checks counted in the API process's memory because Redis did not answer (each limit then holds per process).")

	// UnverifiedPayments should stay 0: a payment signal that no verified event recorded
	// reached a saga (someone signalled Temporal directly), and was refused.
	UnverifiedPayments = counter("checkout_unverified_payments_total", "Payments refused because no verified webhook or provider listing recorded them.")
)

// What needs a person (ops/prometheus/alerts.yml). The gauges below are set by the API's
// periodic monitor (package ops): every API process counts and audits on its own, so each
// exports the same picture; read them with max(), never sum().
var (
	// WorkflowsNeedingAttention is the number of open workflows flagged NeedsAttention or
	// paused by support (ops.AttentionQueries), by workflow type: Checkout (a stuck step, a
	// wrong payment, a paused step) and Refund (a refund waiting for support). It is counted from Temporal's visibility store, not kept by the workers,
	// so it is right after any restart and whichever worker flagged the workflow.
	WorkflowsNeedingAttention = gaugeVec("checkout_workflows_needing_attention", "Open workflows flagged NeedsAttention = true, or paused, in Temporal, by workflow type (Checkout, Refund).", "workflow_type")

	// AuditViolations is what the last periodic audit found, by check (package audit).
	AuditViolations = gaugeVec("checkout_audit_violations", "Broken promises the last periodic audit found, by check (run `checkout audit` for the ids).", "check")

	// AuditCheckFailed is 1 for a check the last periodic audit could not run (a store did
	// not answer): its violation count then says nothing.
	AuditCheckFailed = gaugeVec("checkout_audit_check_failed", "1 when the last periodic audit could not run this check (a store did not answer), else 0.", "check")

	// MonitorLastSuccess is when each periodic monitor (attention, audit) last completed,
	// so an alert can tell "nothing wrong" from "nobody is looking".
	MonitorLastSuccess = gaugeVec("checkout_monitor_last_success_timestamp_seconds", "Unix time at which a periodic monitor (attention, audit) last completed.", "monitor")

	// UnavailableAnswers counts every 503 the API answered, by its problem code: overloaded
	// (admission control or a Temporal rate limit), no_worker, service_unavailable (a
	// dependency down or a deadline), and the rest.
	UnavailableAnswers = counterVec("checkout_unavailable_answers_total", "Requests the API answered 503, by problem code (overloaded, no_worker, service_unavailable, ...).", "code")
)

// counter, counterVec and gaugeVec register one of the product's metrics in the default
// registry: a name, its help text and, for a vector, its label names.
func counter(name, help string) prometheus.Counter {
	return promauto.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return promauto.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return promauto.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

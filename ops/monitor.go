// Package ops is what the on-call person watches. In Go: the API's periodic monitor, which
// counts the workflows waiting for a person and runs the audit, and exports both as gauges
// (package metrics). As files: the Prometheus alerting rules (prometheus/alerts.yml, with
// their promtool unit tests in prometheus/alerts_test.yml) and the Grafana dashboard
// (grafana/checkout-saga.json). ops_test.go keeps the files true to the metrics the product
// really exports.
package ops

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
)

// How often the monitor looks. Counting is two visibility queries, so every 30 s is cheap and
// well inside the alerts' for: durations. An audit reads every SKU and describes every open
// saga, so it runs every 10 minutes: a broken promise is seen within 10 minutes, and the
// audit's own grace (5 minutes) keeps work in flight out of it.
const (
	AttentionEvery = 30 * time.Second
	AuditEvery     = 10 * time.Minute
)

// Each pass gets this long; a pass that overruns is abandoned and counts as failed.
const (
	attentionTimeout = 20 * time.Second
	auditTimeout     = 5 * time.Minute
)

// Names of the monitors in checkout_monitor_last_success_timestamp_seconds{monitor}.
const (
	MonitorAttention = "attention"
	MonitorAudit     = "audit"
)

// AttentionQueries are the visibility queries behind checkout_workflows_needing_attention,
// by workflow type. Only open workflows count: a person can act on those (support's retry
// and acknowledge updates clear the flag), while a closed workflow keeps its last flag until
// Temporal's retention drops it, which would hold an alert firing for days with nothing left
// to do. Closed checkouts that need a look are the failed ones
// (checkout_outcomes_total{status="failed"}). A workflow support paused in the Web UI, or
// one with a paused step (TemporalPauseInfo), counts too: it waits for a person to unpause it,
// and a checkout's paused ending step keeps its units held.
var AttentionQueries = map[string]string{
	"Checkout": `WorkflowType = "Checkout" AND (NeedsAttention = true OR TemporalPauseInfo IS NOT NULL) AND (ExecutionStatus = "Running" OR ExecutionStatus = "Paused")`,
	"Refund":   `WorkflowType = "Refund" AND (NeedsAttention = true OR TemporalPauseInfo IS NOT NULL) AND (ExecutionStatus = "Running" OR ExecutionStatus = "Paused")`,
}

// Auditor runs the product's audit (audit.Auditor).
type Auditor interface {
	Run(ctx context.Context) (shop.AuditReport, error)
}

// Monitor keeps the operator gauges current. Counting from Temporal's visibility store, not
// from counters the workers keep, is what makes the numbers right after a worker restart,
// with several workers, and on replays; every API process runs its own monitor and exports
// the same numbers, which the alerts read with max().
type Monitor struct {
	Temporal client.Client
	Audit    Auditor // nil: no periodic audit
	Logger   *slog.Logger
}

// Run counts now and every AttentionEvery, and audits now and every AuditEvery, until ctx
// ends. A pass that fails is logged and leaves the gauges as they were; the alert on
// checkout_monitor_last_success_timestamp_seconds notices a monitor that keeps failing.
func (m *Monitor) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m.Audit != nil {
			every(ctx, AuditEvery, auditTimeout, m.RecordAudit, m.logFailure(MonitorAudit))
		}
	}()
	every(ctx, AttentionEvery, attentionTimeout, m.CountAttention, m.logFailure(MonitorAttention))
	<-done
}

func (m *Monitor) logFailure(monitor string) func(error) {
	return func(err error) {
		if m.Logger != nil {
			m.Logger.Warn("operator monitor pass failed", "monitor", monitor, "error", err)
		}
	}
}

// every runs pass now and then every interval, each with its own timeout, until ctx ends.
func every(ctx context.Context, interval, timeout time.Duration, pass func(context.Context) error, failed func(error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := pass(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// CountAttention sets checkout_workflows_needing_attention from Temporal's visibility store.
// Visibility trails a flag by about a second, far less than any alert waits.
func (m *Monitor) CountAttention(ctx context.Context) error {
	counts := make(map[string]int64, len(AttentionQueries))
	for workflowType, query := range AttentionQueries {
		resp, err := m.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return fmt.Errorf("count %s workflows needing attention: %w", workflowType, err)
		}
		counts[workflowType] = resp.GetCount()
	}
	// Set together, only once every count is known: never half an update.
	for workflowType, n := range counts {
		metrics.WorkflowsNeedingAttention.WithLabelValues(workflowType).Set(float64(n))
	}
	metrics.MonitorLastSuccess.WithLabelValues(MonitorAttention).SetToCurrentTime()
	return nil
}

// RecordAudit runs the audit and sets checkout_audit_violations and
// checkout_audit_check_failed per check. A check that could not run keeps its last violation
// count (it is unknown now) and is marked failed; the audit counts as done only when every
// check ran.
func (m *Monitor) RecordAudit(ctx context.Context) error {
	rep, err := m.Audit.Run(ctx)
	failed := map[string]bool{}
	for _, e := range rep.Errors {
		failed[e.Check] = true
	}
	if err != nil && len(rep.Errors) == 0 {
		// The audit did not get as far as its checks: every one is unknown.
		for _, check := range audit.Checks {
			failed[check] = true
		}
	}
	found := map[string]int{}
	for _, v := range rep.Violations {
		found[v.Check]++
	}
	for _, check := range audit.Checks {
		if failed[check] {
			metrics.AuditCheckFailed.WithLabelValues(check).Set(1)
			continue
		}
		metrics.AuditCheckFailed.WithLabelValues(check).Set(0)
		metrics.AuditViolations.WithLabelValues(check).Set(float64(found[check]))
	}
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	metrics.MonitorLastSuccess.WithLabelValues(MonitorAudit).SetToCurrentTime()
	return nil
}

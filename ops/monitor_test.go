package ops_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/ops"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// checkout_workflows_needing_attention counts running Checkout and Refund workflows flagged
// NeedsAttention, and those support paused, on a real dev server: not unflagged ones, not
// closed ones. No worker runs, so the workflows stay exactly as started.
func TestCountAttentionCountsRunningFlaggedWorkflows(t *testing.T) {
	srv := testenv.DevServer(t, workflows.DevServerFlags()...)
	c := srv.Client()
	queue := testenv.RandomID("ops-")
	start := func(wf any, arg any, flagged bool) client.WorkflowRun {
		t.Helper()
		run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
			ID: testenv.RandomID("ops-wf-"), TaskQueue: queue,
			TypedSearchAttributes: temporal.NewSearchAttributes(workflows.AttrNeedsAttention.ValueSet(flagged)),
		}, wf, arg)
		if err != nil {
			t.Fatalf("start workflow: %v", err)
		}
		return run
	}
	start(workflows.Checkout, workflows.Input{}, true)
	start(workflows.Checkout, workflows.Input{}, false)
	closed := start(workflows.Checkout, workflows.Input{}, true)
	if err := c.TerminateWorkflow(t.Context(), closed.GetID(), closed.GetRunID(), "test: a closed flagged checkout"); err != nil {
		t.Fatal(err)
	}
	start(workflows.Refund, workflows.RefundInput{}, true)
	start(workflows.Refund, workflows.RefundInput{}, true)
	start(workflows.Refund, workflows.RefundInput{}, false)
	for _, wf := range []any{workflows.Checkout, workflows.Refund} { // paused in the Web UI, not flagged
		run := start(wf, nil, false)
		if _, err := c.WorkflowService().PauseWorkflowExecution(t.Context(), &workflowservice.PauseWorkflowExecutionRequest{
			Namespace: "default", WorkflowId: run.GetID(), Identity: "support", Reason: "test", RequestId: testenv.RandomID("pause-"),
		}); err != nil {
			t.Fatalf("pause %s: %v", run.GetID(), err)
		}
	}

	m := &ops.Monitor{Temporal: c}
	metrics.MonitorLastSuccess.WithLabelValues(ops.MonitorAttention).Set(0)
	checkouts := metrics.WorkflowsNeedingAttention.WithLabelValues("Checkout")
	refunds := metrics.WorkflowsNeedingAttention.WithLabelValues("Refund")
	// Visibility trails the starts by a moment: count until it agrees, with a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := m.CountAttention(t.Context()); err != nil {
			t.Fatal(err)
		}
		if testutil.ToFloat64(checkouts) == 2 && testutil.ToFloat64(refunds) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("needing attention: Checkout %v, Refund %v; want 2 and 3",
				testutil.ToFloat64(checkouts), testutil.ToFloat64(refunds))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := testutil.ToFloat64(metrics.MonitorLastSuccess.WithLabelValues(ops.MonitorAttention)); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("attention monitor's last success = %v, want about now", got)
	}
}

// The periodic audit exports what the real audit finds, per check, on real Postgres, Redis
// and Temporal: a SKU whose on_hand its ledger does not explain is one ledger violation.
// With Redis unreachable, the checks that read it are marked failed, the others still
// count, and the audit is not reported as done.
func TestRecordAuditExportsViolationsPerCheck(t *testing.T) {
	srv := testenv.DevServer(t, workflows.DevServerFlags()...)
	_, pool := testenv.Postgres(t)
	sku := testenv.RandomID("OPS-")
	if _, err := pool.Exec(t.Context(),
		`INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ($1, 5, 100, 'usd', 1)`, sku); err != nil {
		t.Fatal(err)
	}
	m := &ops.Monitor{Temporal: srv.Client(), Audit: audit.New(pool, testenv.Redis(t), srv.Client(), audit.Options{Grace: -1})}
	lastAudit := metrics.MonitorLastSuccess.WithLabelValues(ops.MonitorAudit)
	lastAudit.Set(0)
	if err := m.RecordAudit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, check := range audit.Checks {
		want := 0.0
		if check == audit.CheckLedger {
			want = 1
		}
		if got := testutil.ToFloat64(metrics.AuditViolations.WithLabelValues(check)); got != want {
			t.Errorf("checkout_audit_violations{check=%q} = %v, want %v", check, got, want)
		}
		if got := testutil.ToFloat64(metrics.AuditCheckFailed.WithLabelValues(check)); got != 0 {
			t.Errorf("checkout_audit_check_failed{check=%q} = %v, want 0", check, got)
		}
	}
	if testutil.ToFloat64(lastAudit) == 0 {
		t.Error("a complete audit did not set its last success time")
	}

	// Redis gone: nothing listens on port 1.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = dead.Close() })
	m.Audit = audit.New(pool, dead, srv.Client(), audit.Options{Grace: -1})
	lastAudit.Set(0)
	if err := m.RecordAudit(t.Context()); err == nil {
		t.Fatal("an audit with Redis unreachable reported no error")
	}
	if got := testutil.ToFloat64(metrics.AuditCheckFailed.WithLabelValues(audit.CheckEndedHolds)); got != 1 {
		t.Errorf("checkout_audit_check_failed{check=%q} = %v with Redis down, want 1", audit.CheckEndedHolds, got)
	}
	if got := testutil.ToFloat64(metrics.AuditViolations.WithLabelValues(audit.CheckLedger)); got != 1 {
		t.Errorf("checkout_audit_violations{check=%q} = %v with Redis down, want 1 (the ledger check reads Postgres only)", audit.CheckLedger, got)
	}
	if got := testutil.ToFloat64(metrics.AuditCheckFailed.WithLabelValues(audit.CheckLedger)); got != 0 {
		t.Errorf("checkout_audit_check_failed{check=%q} = %v with Redis down, want 0", audit.CheckLedger, got)
	}
	if got := testutil.ToFloat64(lastAudit); got != 0 {
		t.Errorf("an incomplete audit set its last success time to %v", got)
	}
}

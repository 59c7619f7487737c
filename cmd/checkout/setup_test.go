package main

import (
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// setup-temporal on a cluster without the namespace creates it and registers the search
// attributes; a second run changes nothing.
func TestSetupTemporalCreatesAMissingNamespace(t *testing.T) {
	srv := testenv.DevServer(t)
	cfg := config{TemporalAddress: srv.FrontendHostPort(), Namespace: testenv.RandomID("ns-")}
	for range 2 {
		if err := setupTemporal(t.Context(), cfg); err != nil {
			t.Fatalf("setup-temporal: %v", err)
		}
	}
	c := srv.Client()
	ns, err := c.WorkflowService().DescribeNamespace(t.Context(), &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace})
	if err != nil {
		t.Fatalf("the namespace was not created: %v", err)
	}
	if got := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != namespaceRetention {
		t.Errorf("retention %s, want %s", got, namespaceRetention)
	}
	sas, err := c.OperatorService().ListSearchAttributes(t.Context(), &operatorservice.ListSearchAttributesRequest{Namespace: cfg.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range workflows.SearchAttributes {
		name := k.GetName()
		if _, ok := sas.GetCustomAttributes()[name]; !ok {
			t.Errorf("search attribute %s missing from the new namespace", name)
		}
	}
}

// A Schedule created by an earlier release takes the interval this release asks for (before,
// ensureSchedule ignored an existing Schedule, so a changed interval never reached it).
func TestEnsureScheduleUpdatesAnExistingSchedule(t *testing.T) {
	srv := testenv.DevServer(t, workflows.DevServerFlags()...)
	c := srv.Client()
	id := testenv.RandomID("sched-")
	if err := ensureSchedule(t.Context(), c, id, time.Hour, workflows.ReconcileStock, steps.ReconcileStockInput{}); err != nil {
		t.Fatal(err)
	}
	if err := ensureSchedule(t.Context(), c, id, 7*time.Minute, workflows.ReconcileStock, steps.ReconcileStockInput{}); err != nil {
		t.Fatal(err)
	}
	d, err := c.ScheduleClient().GetHandle(t.Context(), id).Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Schedule.Spec.Intervals; len(got) != 1 || got[0].Every != 7*time.Minute {
		t.Errorf("schedule intervals %+v, want every 7m", got)
	}
}

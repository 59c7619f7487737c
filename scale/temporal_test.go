package scale

import (
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// TestTemporalServerShape: the scale profile's server is the full server on Postgres with the
// shards asked for, namespace default with its retention, and the contract's search attributes.
func TestTemporalServerShape(t *testing.T) {
	srv := testenv.TemporalServer(t, 4)
	c, err := client.Dial(client.Options{HostPort: srv.HostPort, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ws := c.WorkflowService()
	info, err := ws.GetClusterInfo(ctx(t, 30*time.Second), &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHistoryShardCount() != 4 || info.GetPersistenceStore() != "postgres12" || info.GetVisibilityStore() != "postgres12" {
		t.Errorf("cluster: %d shards, persistence %q, visibility %q; want 4 shards on postgres12",
			info.GetHistoryShardCount(), info.GetPersistenceStore(), info.GetVisibilityStore())
	}
	ns, err := ws.DescribeNamespace(ctx(t, 30*time.Second), &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 7*24*time.Hour {
		t.Errorf("namespace default keeps closed workflows %s, want 7 days (checkout setup-temporal)", got)
	}
	sa, err := c.OperatorService().ListSearchAttributes(ctx(t, 30*time.Second), &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range workflows.SearchAttributes {
		name := k.GetName()
		if _, ok := sa.GetCustomAttributes()[name]; !ok {
			t.Errorf("search attribute %s is not registered; have %v", name, sa.GetCustomAttributes())
		}
	}
}

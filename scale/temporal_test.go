package scale

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
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

// TestSearchAttributesAreUsableOnceSetUp: a saga started right after `checkout setup-temporal`
// is not refused for its search attributes. On SQL visibility they are aliases in the
// namespace's record, which each service reads from a namespace cache refreshed every few
// seconds; the server here refreshes it every 20 s, so a setup that returned before the
// aliases were served leaves the start inside that window.
func TestSearchAttributesAreUsableOnceSetUp(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	server, sqlTool := testenv.TemporalServerBinaries(root)
	if _, err := os.Stat(server); err != nil {
		t.Skipf("the Temporal server is not built at %s: run `make tools`", server)
	}
	dir := t.TempDir()
	profile, err := os.ReadFile(filepath.Join(root, "tools", "scale", "config", "dynamicconfig", "scale.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dynamicConfig := filepath.Join(dir, "dynamicconfig.yaml")
	slow := append(profile, []byte("system.namespaceCacheRefreshInterval:\n  - value: 20s\n")...)
	if err := os.WriteFile(dynamicConfig, slow, 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := testenv.FreePortBase(testenv.TemporalServerPorts)
	if err != nil {
		t.Fatal(err)
	}
	opts := testenv.TemporalServerOptions{Root: root, Server: server, SQLTool: sqlTool, PortBase: base, Shards: 1,
		Database: testenv.RandomID("temporal_test_"), AdminURL: "postgres://postgres@127.0.0.1:5432/postgres",
		Dir: dir, DynamicConfig: dynamicConfig}
	t.Cleanup(func() { _ = testenv.DropTemporalDatabases(opts.AdminURL, opts.Database) })
	srv, err := testenv.StartTemporalServer(ctx(t, 3*time.Minute), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if err := testenv.SetupTemporal(ctx(t, 2*time.Minute), root, srv.HostPort); err != nil {
		t.Fatal(err)
	}

	c, err := client.Dial(client.Options{HostPort: srv.HostPort, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := workflows.Input{CheckoutID: "sa-probe", CustomerID: "u-1", Items: []shop.CartLine{{SKU: "SKU-1", Quantity: 1}}}
	if _, err := c.ExecuteWorkflow(ctx(t, 30*time.Second), client.StartWorkflowOptions{ID: "sa-probe", TaskQueue: "sa-probe",
		TypedSearchAttributes: workflows.StartAttributes(in)}, "Nothing"); err != nil {
		t.Fatalf("a start right after setup-temporal: %v", err)
	}
}

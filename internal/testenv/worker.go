package testenv

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
)

// RunWorkflowOnce dials hostPort with metrics handler mh, starts a worker for wf and act on a
// fresh task queue, and runs wf to its end. The worker keeps polling until the test ends, so
// a test can watch what its metrics export afterwards (empty polls, failed polls).
func RunWorkflowOnce(t testing.TB, hostPort string, mh client.MetricsHandler, wf, act any) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: hostPort, Namespace: "default", MetricsHandler: mh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	queue := RandomID("wf-once-")
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(wf)
	w.RegisterActivity(act)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, wf)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

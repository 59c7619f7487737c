package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
)

func greet(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var s string
	err := workflow.ExecuteActivity(ctx, hello).Get(ctx, &s)
	return s, err
}

func hello(context.Context) (string, error) { return "hello", nil }

// A worker whose client uses NewTemporalHandler exports the SDK metrics the alerts read, in
// Prometheus form: the workflow task schedule-to-start latency as a histogram with a bucket
// edge at 1 s (so a p95 over 1 s is computable across workers), and the poll counters.
func TestTemporalHandlerExportsHistogramsAndPollCounters(t *testing.T) {
	srv := testenv.DevServer(t)
	reg := prometheus.NewRegistry()
	handler, closer := metrics.NewTemporalHandler(reg)
	defer closer.Close()
	testenv.RunWorkflowOnce(t, srv.FrontendHostPort(), handler, greet, hello)

	// The reporter flushes every second: wait for what the alerts read, not for a time.
	s2sName, pollName := "temporal_workflow_task_schedule_to_start_latency_seconds", "temporal_workflow_task_queue_poll_succeed_total"
	var families map[string]*dto.MetricFamily
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		families, err = gather(reg)
		require.NoError(c, err, "gather")
		var observed uint64
		var polls float64
		for _, m := range families[s2sName].GetMetric() {
			observed += m.GetHistogram().GetSampleCount()
		}
		for _, m := range families[pollName].GetMetric() {
			polls += m.GetCounter().GetValue()
		}
		assert.True(c, observed > 0 && polls > 0, "after a workflow ran, %s observed %d and %s is %v; exported: %v",
			s2sName, observed, pollName, polls, names(families))
	}, 30*time.Second, 200*time.Millisecond)

	s2s := families[s2sName]
	if s2s.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("%s is a %s, want a histogram", s2sName, s2s.GetType())
	}
	for _, m := range s2s.GetMetric() {
		edge := false
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == 1 {
				edge = true
			}
		}
		if !edge {
			t.Errorf("%s has no bucket edge at 1 s: %v", s2sName, m.GetHistogram().GetBucket())
		}
	}
	if families["temporal_activity_execution_latency_seconds"].GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("temporal_activity_execution_latency_seconds is not a histogram: %v", families["temporal_activity_execution_latency_seconds"])
	}
}

// gather reads g's families by name.
func gather(g prometheus.Gatherer) (map[string]*dto.MetricFamily, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

func names(families map[string]*dto.MetricFamily) []string {
	var out []string
	for name := range families {
		out = append(out, name)
	}
	return out
}

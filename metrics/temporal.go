package metrics

import (
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// TimerBuckets are the histogram buckets (seconds) of every Temporal SDK timer. Timers are
// histograms, not tally's default summaries: a summary's quantiles are per process and cannot
// be added up across workers, while histogram buckets can, so
// histogram_quantile(0.95, sum by (le) (rate(..._bucket[5m]))) is the fleet's p95. The
// buckets have an edge at exactly 1 s, the bound of Temporal's guidance for the workflow
// task schedule-to-start p95, so "p95 over 1 s" is read off a bucket, not interpolated
// across one; they reach 60 s for the long polls and saga-length latencies.
var TimerBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// NewTemporalHandler exports the Temporal SDK's metrics (client and worker) into reg in
// Prometheus form: names as the SDK documents them (temporal_..., timers with _seconds), each
// timer a histogram with TimerBuckets. Give the handler to client.Options.MetricsHandler.
// Closing the closer flushes and stops the reporting loop; a process can leave it open.
func NewTemporalHandler(reg prometheus.Registerer) (client.MetricsHandler, io.Closer) {
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:              reg,
		DefaultTimerType:        tallyprom.HistogramTimerType,
		DefaultHistogramBuckets: TimerBuckets,
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
	}, time.Second)
	return sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer
}

package checkouttest

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeMetrics reads a /metrics endpoint in the Prometheus text format and returns its
// families by name, parsed by prometheus/common's expfmt rather than by hand.
func ScrapeMetrics(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of %s: %w", url, err)
	}
	return families, nil
}

// Sum adds up a family's samples: counter and gauge values, histogram and summary sums.
func Sum(f *dto.MetricFamily) float64 {
	var total float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += m.GetHistogram().GetSampleSum()
		case m.Summary != nil:
			total += m.GetSummary().GetSampleSum()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

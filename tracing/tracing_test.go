package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	sdklog "go.temporal.io/sdk/log"
)

func TestTracingIsOnOnlyWhenAnExporterIsConfigured(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	} {
		if got := Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("Enabled(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

func TestSetupOffInstallsNothing(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := Setup(t.Context(), "checkout-test", slog.Default())
	if err != nil || tr != nil {
		t.Fatalf("Setup with no OTEL_* variables = %v, %v; want nil, nil (off)", tr, err)
	}
	interceptors, err := tr.TemporalInterceptors()
	if interceptors != nil || err != nil || tr.EchoMiddleware() != nil || tr.PgxTracer() != nil || tr.InstrumentRedis(nil) != nil || tr.Shutdown(t.Context()) != nil {
		t.Error("tracing off still installs something")
	}
}

func TestSetupNamesABadVariable(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, `OTEL_TRACES_EXPORTER="jaeger"`},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, `OTEL_EXPORTER_OTLP_PROTOCOL="thrift"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://collector"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Setup(t.Context(), "checkout-test", slog.Default())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Setup with %v: %v, want an error naming %s", tt.env, err, tt.want)
			}
		})
	}
}

// A Redis command or Temporal call that nothing traced made (the worker's heartbeat) starts
// no trace; a request or a workflow does, and what they call is kept under them.
func TestUntracedCallsStartNoTrace(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	exporter := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.WithSyncer(exporter))
	tracer := tr.provider.Tracer("test")

	_, heartbeat := tracer.Start(context.Background(), "set", trace.WithSpanKind(trace.SpanKindClient))
	heartbeat.End()
	ctx, request := tracer.Start(context.Background(), "POST /v1/checkouts", trace.WithSpanKind(trace.SpanKindServer))
	_, call := tracer.Start(ctx, "evalsha", trace.WithSpanKind(trace.SpanKindClient))
	call.End()
	request.End()

	var names []string
	for _, s := range exporter.GetSpans() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "evalsha,POST /v1/checkouts" {
		t.Errorf("exported %v, want the request and its call only", names)
	}
}

func TestLogHandlerAddsTheTrace(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
	})

	logger.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "in a span")
	logger.InfoContext(context.Background(), "outside")
	// The Temporal SDK's activity logger: no context, the ids as TraceID and SpanID fields.
	sdklog.With(sdklog.NewStructuredLogger(logger), "TraceID", sc.TraceID(), "SpanID", sc.SpanID()).Info("from an activity")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []bool{true, false, true} {
		var line map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &line); err != nil {
			t.Fatal(err)
		}
		_, sdkKey := line["TraceID"]
		got := line[TraceIDKey] == sc.TraceID().String() && line[SpanIDKey] == sc.SpanID().String()
		if got != want || sdkKey {
			t.Errorf("line %s: carries the trace %v, want %v (and no TraceID key)", lines[i], got, want)
		}
	}
}

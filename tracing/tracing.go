// Package tracing is the product's OpenTelemetry tracing: one trace follows a checkout from
// its HTTP request through update-with-start, the saga, its activities and their Redis and
// Postgres calls. Every span comes from the libraries' own instrumentation (the Temporal
// SDK's interceptor, otelecho, redisotel, otelpgx); this package only builds the tracer
// provider from the standard OTEL_* variables and hands it to each of them.
//
// Tracing is off unless the environment asks for it (see Enabled). Off, Setup returns a nil
// *Tracing, whose methods install nothing: no middleware, hook, tracer or interceptor runs,
// so an untraced process pays nothing for this package but LogHandler's context lookup.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Tracing hands one tracer provider to every instrumented library. A nil *Tracing is
// tracing off: each method then returns nothing to install.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
}

// Propagator is how a trace crosses process boundaries: W3C Trace Context and Baggage in
// HTTP headers, and the same in Temporal's headers (the SDK's own default), so a caller's
// traceparent continues into the API and the API's span into the worker.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Enabled reports whether the environment asks for traces. The SDK's own default exporter
// is OTLP to localhost, which would make every process that sets nothing try to export, so
// the rule is stricter: tracing is on when OTEL_TRACES_EXPORTER names an exporter other than
// "none" ("otlp" or "console"), or, with OTEL_TRACES_EXPORTER unset, when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
// OTEL_SDK_DISABLED=true turns it off whatever else is set.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp != "" {
		return exp != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup builds the tracer provider from the environment when Enabled, makes it and
// Propagator OpenTelemetry's globals, and sends the SDK's own errors (an unreachable
// collector) to logger. service is service.name unless OTEL_SERVICE_NAME sets another.
// Everything else is the exporters' and SDK's own handling of the standard variables:
// OTEL_TRACES_EXPORTER (otlp, console), OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf by
// default, or grpc), OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_* and OTEL_TRACES_SAMPLER[_ARG]. Off, it returns nil.
// A value the exporter cannot use is an error naming the variable. The caller must call
// Shutdown, which flushes the spans not yet exported.
func Setup(ctx context.Context, service string, logger *slog.Logger) (*Tracing, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if err := checkEndpoint(os.Getenv(name)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	exporter, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q (otlp, console or none), OTEL_EXPORTER_OTLP_PROTOCOL=%q, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=%q (grpc or http/protobuf): %w",
			os.Getenv("OTEL_TRACES_EXPORTER"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)), // OTEL_SERVICE_NAME, below, wins
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "error", err)
	}))
	t := New(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(t.provider)
	otel.SetTextMapPropagator(t.propagator)
	return t, nil
}

// checkEndpoint refuses an OTLP endpoint that is not a URL: the exporters would otherwise
// ignore it quietly and export to their default.
func checkEndpoint(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q must be a URL such as http://collector:4318", raw)
	}
	return nil
}

// New returns tracing on a tracer provider built with opts (an exporter or span processor,
// a resource), sampling as Setup's does. Tests pass an in-memory exporter here; it sets no
// globals.
func New(opts ...sdktrace.TracerProviderOption) *Tracing {
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append([]sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.ParentBased(noClientRoots{}))}, opts...)
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(opts...), propagator: Propagator}
}

// Shutdown exports the spans still buffered and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// TemporalInterceptors are the Temporal client's interceptors: the SDK's OpenTelemetry
// interceptor. Set on the client, it also applies to every worker built from that client,
// so the API's update-with-start, the workflow, and each activity and local activity get
// a span, parented across processes through Temporal's headers.
func (t *Tracing) TemporalInterceptors() ([]interceptor.ClientInterceptor, error) {
	if t == nil {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            t.provider.Tracer("temporal-sdk-go"),
		TextMapPropagator: t.propagator,
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{i}, nil
}

// EchoMiddleware starts each HTTP request's server span (and continues a caller's
// traceparent); it must run first so the request log and every handler see the span.
// Health probes are not traced: a load balancer polls them every few seconds. Off, nil.
func (t *Tracing) EchoMiddleware() echo.MiddlewareFunc {
	if t == nil {
		return nil
	}
	return otelecho.Middleware("checkout-api",
		otelecho.WithTracerProvider(t.provider),
		// The public edge takes a caller's traceparent but not its baggage: baggage would be
		// carried into Temporal's headers and kept in every saga's history.
		otelecho.WithPropagators(propagation.TraceContext{}),
		otelecho.WithSkipper(func(c echo.Context) bool {
			return c.Path() == "/healthz" || c.Path() == "/readyz" || middleware.DefaultSkipper(c)
		}),
	)
}

// InstrumentRedis adds a span per Redis command (EVALSHA, EVAL, pipelines) to rdb, a client
// or a Cluster client (each node's, as it is discovered). The caller's file and line are
// left out: go-redis finds them with runtime.Callers on every command, and the parent span
// already says which step ran it. So are the commands' arguments (checkout and customer
// ids, quantities): a span names the command only.
func (t *Tracing) InstrumentRedis(rdb redis.UniversalClient) error {
	if t == nil {
		return nil
	}
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(t.provider), redisotel.WithCallerEnabled(false), redisotel.WithDBStatement(false)); err != nil {
		return fmt.Errorf("tracing: instrument redis: %w", err)
	}
	return nil
}

// PgxTracer is the Postgres pool's query tracer (pgx ConnConfig.Tracer): a span per query,
// batch and connection acquire, only under a span that is recording, so background queries
// start no trace. Names carry the operation kind ("query INSERT", and under it "prepare
// INSERT" the first time a connection sees the statement), else the two read alike. Off, nil.
func (t *Tracing) PgxTracer() pgx.QueryTracer {
	if t == nil {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithTracerProvider(t.provider), otelpgx.WithQuerySpanNamePrefix())
}

// noClientRoots samples every trace (the SDK's default) except one that would begin with a
// client span: a Redis command or Temporal call that no request or workflow made, such as
// the worker's heartbeat every second. ParentBased applies it to roots only; a span with a
// parent follows its parent. OTEL_TRACES_SAMPLER, when set, replaces it.
type noClientRoots struct{}

func (noClientRoots) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	decision := sdktrace.RecordAndSample
	if p.Kind == trace.SpanKindClient {
		decision = sdktrace.Drop
	}
	return sdktrace.SamplingResult{Decision: decision, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (noClientRoots) Description() string { return "NoClientRoots" }

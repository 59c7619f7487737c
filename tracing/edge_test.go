package tracing

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// A public caller's traceparent is continued, but its baggage is not taken in: whatever a
// request carries would otherwise ride into Temporal's headers and every saga's history.
func TestTheEdgeTakesNoForeignBaggage(t *testing.T) {
	tr := New(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	e := echo.New()
	e.Use(tr.EchoMiddleware())
	var got baggage.Baggage
	var traceID trace.TraceID
	e.GET("/v1/checkouts/:id", func(c echo.Context) error {
		got = baggage.FromContext(c.Request().Context())
		traceID = trace.SpanContextFromContext(c.Request().Context()).TraceID()
		return c.NoContent(http.StatusOK)
	})
	req := httptest.NewRequest(http.MethodGet, "/v1/checkouts/c-1", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	req.Header.Set("baggage", "customer=someone-else,role=admin")
	e.ServeHTTP(httptest.NewRecorder(), req)
	if got.Len() != 0 {
		t.Errorf("the request's context carries the caller's baggage %q", got.String())
	}
	if traceID.String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace %s, want the caller's traceparent continued", traceID)
	}
}

// A Redis span names its command, not its arguments (checkout and customer ids).
func TestRedisSpansLeaveTheArgumentsOut(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	rdb := testenv.Redis(t)
	if err := tr.InstrumentRedis(rdb); err != nil {
		t.Fatal(err)
	}
	ctx, span := tr.provider.Tracer("test").Start(t.Context(), "step")
	rdb.Set(ctx, "tracing-test-"+testenv.RandomID(""), "customer-secret-id", 0)
	span.End()
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "db.statement" || a.Key == "db.query.text" {
				t.Errorf("span %s carries %s = %q", s.Name(), a.Key, a.Value.Emit())
			}
		}
	}
	if len(rec.Ended()) < 2 {
		t.Fatalf("%d spans ended, want the step's and the command's", len(rec.Ended()))
	}
}

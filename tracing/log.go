package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys of the trace and span ids, on every line written inside a span.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// LogHandler wraps h so that logs carry the trace: a record logged with a context that holds
// a span (an HTTP request's, an activity's) gets trace_id and span_id. The Temporal SDK logs
// without a context; on an activity's or workflow's logger its tracing interceptor adds the
// ids as TraceID and SpanID instead, which are renamed here, so one key finds every line of
// a trace whoever wrote it.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ next slog.Handler }

func (h logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone() // the caller's record may share its attributes' backing array
		r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	renamed := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		switch id := a.Value.Any().(type) {
		case trace.TraceID:
			if a.Key == "TraceID" {
				a = slog.String(TraceIDKey, id.String())
			}
		case trace.SpanID:
			if a.Key == "SpanID" {
				a = slog.String(SpanIDKey, id.String())
			}
		}
		renamed[i] = a
	}
	return logHandler{h.next.WithAttrs(renamed)}
}

func (h logHandler) WithGroup(name string) slog.Handler { return logHandler{h.next.WithGroup(name)} }

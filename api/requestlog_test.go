package api_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/checkout-saga/checkout-saga/api"
)

// Each request leaves one "http request" line with its method, path, final status (the
// error handler's, for a refused request), duration and the problem's code.
func TestRequestLogLineHasTheFinalStatusAndProblemCode(t *testing.T) {
	var buf bytes.Buffer
	e := api.New(api.Config{}, api.Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/checkouts/not%20an%20id", nil))
	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("GET of a bad id answered %d, want 422", rec.Code)
	}
	line := requestLine(t, &buf)
	want := map[string]any{"level": "INFO", "method": "GET", "path": "/v1/checkouts/not an id", "status": 422.0, "code": "invalid_request"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("request line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if _, ok := line["duration_ms"].(float64); !ok {
		t.Errorf("request line has no duration_ms: %v", line)
	}
	if _, ok := line["checkout_id"]; ok {
		t.Errorf("request line names a checkout for a request that has none: %v", line)
	}
}

// requestLine returns the one "http request" line in a JSON log.
func requestLine(t *testing.T, log *bytes.Buffer) map[string]any {
	t.Helper()
	var found map[string]any
	dec := json.NewDecoder(log)
	for dec.More() {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("read log: %v", err)
		}
		if line["msg"] == "http request" {
			if found != nil {
				t.Fatalf("two request lines: %v and %v", found, line)
			}
			found = line
		}
	}
	if found == nil {
		t.Fatalf("no request line in the log")
	}
	return found
}

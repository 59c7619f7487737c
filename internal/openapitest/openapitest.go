// Package openapitest holds the API to its OpenAPI description (api/openapi.json) in tests:
// Handler wraps the API so that every request a test sends and every answer it gets is
// validated against the document with kin-openapi's openapi3filter, and reported on the test
// when the document does not allow it. The tests of package api and e2e serve the API
// through it.
//
// What fails a test:
//   - a request to a documented path answered with a status its operation does not list, a
//     header it requires missing (Location, ETag, Retry-After, WWW-Authenticate) or a body that
//     does not match its schema (response objects allow no undocumented field);
//   - a request the document refuses (a missing required field or header, a bad id, no
//     bearer token) answered with anything but a 4xx;
//   - a request to a path or method the document does not have, answered with anything but a
//     401, 404 or 405 problem (the API's answers to a route it does not serve).
package openapitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/checkout-saga/checkout-saga/api"
)

// Validator checks exchanges against one OpenAPI document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	bodies *bodySchemas

	// verdicts remembers what Check said of each exchange, by everything the check reads of
	// it: kin-openapi compiles each parameter's and header's schema anew on every check
	// (about 1 ms an exchange, 10 ms under -race), and tests repeat exchanges: polls of a
	// checkout until it ends, retries answered 503 alike.
	mu       sync.Mutex
	verdicts map[[sha256.Size]byte]error
}

// New loads and validates an OpenAPI document.
func New(document []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	// Tests serve the API on other hosts and ports than the documented server; the paths
	// are what they check.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	bodies, err := newBodySchemas(document)
	if err != nil {
		return nil, fmt.Errorf("read the OpenAPI document's schemas: %w", err)
	}
	return &Validator{doc: doc, router: router, bodies: bodies, verdicts: map[[sha256.Size]byte]error{}}, nil
}

var (
	apiOnce      sync.Once
	apiValidator *Validator
	apiErr       error
)

// API is the validator of the API's own document (api.OpenAPIDocument), loaded once.
func API() (*Validator, error) {
	apiOnce.Do(func() { apiValidator, apiErr = New(api.OpenAPIDocument()) })
	return apiValidator, apiErr
}

// Document is the loaded document.
func (v *Validator) Document() *openapi3.T { return v.doc }

// Exchange is one request and its answer, both bodies read in full.
type Exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Check returns what the document does not allow about the exchange, or nil.
func (v *Validator) Check(ctx context.Context, x Exchange) error {
	req := x.Request.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	what := x.Request.Method + " " + x.Request.URL.RequestURI()

	route, params, err := v.router.FindRoute(req)
	if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
		switch x.Status {
		case http.StatusUnauthorized, http.StatusNotFound, http.StatusMethodNotAllowed:
			return v.checkProblem(what, x)
		}
		return fmt.Errorf("%s: %v in the OpenAPI document, yet the API answered %d %s", what, err, x.Status, x.Body)
	}
	if err != nil {
		return fmt.Errorf("%s: find its route in the OpenAPI document: %w", what, err)
	}

	key := exchangeKey(route, x)
	v.mu.Lock()
	verdict, seen := v.verdicts[key]
	v.mu.Unlock()
	if !seen {
		verdict = v.check(ctx, what, req, route, params, x)
		v.mu.Lock()
		v.verdicts[key] = verdict
		v.mu.Unlock()
	}
	return verdict
}

// check validates an exchange on a documented route.
func (v *Validator) check(ctx context.Context, what string, req *http.Request, route *routers.Route, params map[string]string, x Exchange) error {
	// kin-openapi checks the route's parameters, headers, security and statuses; the bodies
	// are checked against schemas compiled once (see bodySchemas).
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: credentialPresent, ExcludeRequestBody: true},
	}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if reqErr == nil {
		reqErr = v.bodies.checkRequest(route, x.Request.Header, x.RequestBody)
	}
	if reqErr != nil && (x.Status < 400 || x.Status >= 500) {
		return fmt.Errorf("%s: the API answered %d to a request the OpenAPI document refuses: %v", what, x.Status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: x.Status, Header: x.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: true},
	}
	respErr := openapi3filter.ValidateResponse(ctx, out)
	if respErr == nil {
		respErr = v.bodies.checkResponse(route, x.Status, x.Header, x.Body)
	}
	if respErr != nil {
		return fmt.Errorf("%s: the answer %d %s does not match the OpenAPI document: %v", what, x.Status, x.Body, respErr)
	}
	return nil
}

// exchangeKey digests everything about an exchange that its route's check reads: the method
// and URL, the request headers the operation names (and Content-Type, Authorization and the
// document's security headers), both bodies, the status and the response headers the answer
// names.
func exchangeKey(route *routers.Route, x Exchange) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		_ = binary.Write(h, binary.LittleEndian, int64(len(s)))
		h.Write([]byte(s))
	}
	field(x.Request.Method)
	field(x.Request.URL.RequestURI())
	reqHeaders := []string{"Content-Type", "Authorization"}
	if c := route.Spec.Components; c != nil {
		for _, s := range c.SecuritySchemes {
			if s.Value != nil && s.Value.Type == "apiKey" && s.Value.In == "header" {
				reqHeaders = append(reqHeaders, s.Value.Name)
			}
		}
	}
	for _, p := range slices.Concat(route.PathItem.Parameters, route.Operation.Parameters) {
		if p.Value != nil && p.Value.In == openapi3.ParameterInHeader {
			reqHeaders = append(reqHeaders, p.Value.Name)
		}
	}
	for _, name := range reqHeaders {
		field(name)
		field(strings.Join(x.Request.Header.Values(name), "\n"))
	}
	field(string(x.RequestBody))
	field(strconv.Itoa(x.Status))
	respHeaders := []string{"Content-Type"}
	if r := route.Operation.Responses.Status(x.Status); r != nil && r.Value != nil {
		for name := range r.Value.Headers {
			respHeaders = append(respHeaders, name)
		}
	}
	slices.Sort(respHeaders)
	for _, name := range respHeaders {
		field(name)
		field(strings.Join(x.Header.Values(name), "\n"))
	}
	field(string(x.Body))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// checkProblem checks that an answer to a route the document does not have is a problem.
func (v *Validator) checkProblem(what string, x Exchange) error {
	if ct := x.Header.Get("Content-Type"); ct != "application/problem+json" {
		return fmt.Errorf("%s: answered %d with Content-Type %q, want application/problem+json", what, x.Status, ct)
	}
	schema, err := v.bodies.schema("/components/schemas/Problem")
	if err != nil {
		return err
	}
	value, err := jsonschema.UnmarshalJSON(bytes.NewReader(x.Body))
	if err == nil {
		err = schema.Validate(value)
	}
	if err != nil {
		return fmt.Errorf("%s: the answer %d %s is not the document's Problem: %v", what, x.Status, x.Body, err)
	}
	return nil
}

// credentialPresent is one of the document's security schemes as a request must meet it: a
// bearer token (adminToken, clientToken) or the scheme's header (checkoutSecret) is sent.
// Whether it is the right one is the API's to judge (401, or 404 for a checkout secret).
func credentialPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	header := in.RequestValidationInput.Request.Header
	if s := in.SecurityScheme; s != nil && s.Type == "apiKey" && s.In == "header" {
		if header.Get(s.Name) == "" {
			return errors.New("no " + s.Name + " header")
		}
		return nil
	}
	scheme, token, _ := strings.Cut(header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// Reporter is where Handler reports what the document does not allow: a *testing.T.
type Reporter interface {
	Errorf(format string, args ...any)
}

// Handler serves next and checks every exchange against the API's document, reporting each
// mismatch on t. It passes everything through unchanged (the response writer is reachable
// with http.ResponseController), so the API behaves as it does without it.
func Handler(t Reporter, next http.Handler) http.Handler {
	v, err := API()
	if err != nil {
		t.Errorf("%v", err)
		return next
	}
	return v.Handler(t, next)
}

// Handler is the package's Handler for this validator's document.
func (v *Validator) Handler(t Reporter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody := &recordingBody{ReadCloser: r.Body}
		r.Body = reqBody
		rec := &recordingWriter{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		// The API may stop reading a body it refuses (too large, say): what the document
		// judges is the request as sent, so read what is left of it.
		_, _ = io.Copy(io.Discard, reqBody)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if err := v.Check(r.Context(), Exchange{
			Request: r, RequestBody: reqBody.buf.Bytes(),
			Status: status, Header: rec.Header().Clone(), Body: rec.body.Bytes(),
		}); err != nil {
			t.Errorf("OpenAPI: %v", err)
		}
	})
}

// recordingBody keeps a copy of what is read of a request body.
type recordingBody struct {
	io.ReadCloser
	buf bytes.Buffer
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

// recordingWriter keeps the status and a copy of the body of a response it passes on.
type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (read deadlines, flushes).
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

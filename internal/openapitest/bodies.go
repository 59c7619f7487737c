package openapitest

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// bodySchemas validates request and response bodies with the JSON Schema 2020-12 validator
// kin-openapi uses for 3.1 documents (santhosh-tekuri/jsonschema), but compiles each of the
// document's body schemas once: kin-openapi compiles a schema anew on every validation,
// about 3 ms an exchange (20 ms under -race), enough to starve the end-to-end flash sale of
// CPU on two cores. Each schema is compiled in place, by its JSON pointer into the document,
// so its $refs resolve as in any viewer.
type bodySchemas struct {
	mu       sync.Mutex // the compiler is not safe for concurrent use
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

const documentURL = "openapi.json"

func newBodySchemas(document []byte) (*bodySchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(document))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // date-time and uri are promises too
	if err := c.AddResource(documentURL, doc); err != nil {
		return nil, err
	}
	return &bodySchemas{compiler: c, compiled: map[string]*jsonschema.Schema{}}, nil
}

// schema is the compiled schema at a JSON pointer into the document.
func (b *bodySchemas) schema(pointer string) (*jsonschema.Schema, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.compiled[pointer]; ok {
		return s, nil
	}
	s, err := b.compiler.Compile(documentURL + "#" + pointer)
	if err != nil {
		return nil, fmt.Errorf("compile the schema at %s: %w", pointer, err)
	}
	b.compiled[pointer] = s
	return s, nil
}

// checkRequest validates the request body against the operation's requestBody.
func (b *bodySchemas) checkRequest(route *routers.Route, header http.Header, body []byte) error {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return nil
	}
	if len(body) == 0 {
		if rb.Value.Required {
			return errors.New("request body is required")
		}
		return nil
	}
	base := rb.Ref
	if base == "" {
		base = operationPointer(route) + "/requestBody"
	}
	return b.check(base, rb.Value.Content, header, body, "request")
}

// checkResponse validates the answer's body against the response the document has for its
// status (kin-openapi checked that there is one).
func (b *bodySchemas) checkResponse(route *routers.Route, status int, header http.Header, body []byte) error {
	r := route.Operation.Responses.Status(status)
	if r == nil || r.Value == nil || len(r.Value.Content) == 0 {
		return nil
	}
	base := r.Ref
	if base == "" {
		base = operationPointer(route) + "/responses/" + strconv.Itoa(status)
	}
	return b.check(base, r.Value.Content, header, body, "response")
}

// check validates body against the schema of its media type in content, a map of media types
// at base in the document.
func (b *bodySchemas) check(base string, content openapi3.Content, header http.Header, body []byte, what string) error {
	ct := header.Get("Content-Type")
	mediaType, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%s Content-Type %q: %w", what, ct, err)
	}
	if _, ok := content[mediaType]; !ok {
		return fmt.Errorf("%s Content-Type %q is not one the document lists", what, ct)
	}
	s, err := b.schema(strings.TrimPrefix(base, "#") + "/content/" + escapePointer(mediaType) + "/schema")
	if err != nil {
		return err
	}
	value, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s body is not JSON: %w", what, err)
	}
	if err := s.Validate(value); err != nil {
		return fmt.Errorf("%s body: %w", what, err)
	}
	return nil
}

// operationPointer is the JSON pointer of the route's operation in the document.
func operationPointer(route *routers.Route) string {
	return "/paths/" + escapePointer(route.Path) + "/" + strings.ToLower(route.Method)
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

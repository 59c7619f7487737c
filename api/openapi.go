package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3.1 description of every route New registers, written by
// hand and kept true by the tests: TestOpenAPIDescribesEveryRoute compares its operations
// with Echo's routes, and every request the api and e2e tests send is validated against it
// (internal/openapitest).
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the API's OpenAPI 3.1 description, as GET /openapi.json serves it.
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// openAPI is GET /openapi.json.
func (s *Server) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}

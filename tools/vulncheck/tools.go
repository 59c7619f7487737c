//go:build tools

// Package vulncheck records govulncheck and the vulnerability database's source as build
// dependencies; see go.mod. The Makefile builds govulncheck into .tools/ and makedb turns the
// database's files into .tools/vulndb.
package vulncheck

import (
	_ "golang.org/x/vuln/cmd/govulncheck"
	// Only the module's files are used (data/osv), not its code. This package of it imports
	// nothing, so importing it keeps the pin in go.mod through go mod tidy without bringing
	// in the module's own dependencies (Google Cloud, gRPC, go-git).
	_ "golang.org/x/vulndb/cmd/vulnreport/color"
)

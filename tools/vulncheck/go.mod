// This module pins govulncheck (golang.org/x/vuln) and the Go vulnerability database it reads
// (golang.org/x/vulndb, the database's source repository, at the snapshot of its commit
// 2026-11-05 23:49:57 UTC). The machines reach no vuln.go.dev, only the module proxy, so the
// Makefile builds govulncheck into .tools/ and makedb writes the database's OSV files
// (data/osv/ of the vulndb module) into .tools/vulndb for `govulncheck -db file://...`.
// To refresh the database, take a newer pseudo-version of golang.org/x/vulndb
// (docs/security.md says how).
module github.com/checkout-saga/checkout-saga/tools/vulncheck

go 1.26.0

toolchain go1.27.3

require (
	golang.org/x/vuln v1.9.0
	golang.org/x/vulndb v0.0.0-20261105234957-e22db6528018
)

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/telemetry v0.0.0-20261010193011-f71dc92da45e // indirect
	golang.org/x/tools v0.52.0 // indirect
)

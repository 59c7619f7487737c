// Package compose validates the repository's docker-compose.yml with the compose-spec
// loader, and the settings its documented run command gives the product's services with the
// binary's own checks (`checkout check-config`). It is a module of its own so that compose-go
// and the Docker modules it brings stay out of the product's go.mod.
package compose

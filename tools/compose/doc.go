// Package compose validates the repository's docker-compose.yml with the compose-spec
// loader. It is a module of its own so that compose-go and the Docker modules it brings stay
// out of the product's go.mod.
package compose

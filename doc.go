// Package checkoutsaga holds repository-level checks, such as the docker-compose validation.
package checkoutsaga

// Package checkoutsaga holds repository-level checks, such as the import direction.
package checkoutsaga

// Package steps is the saga's step vocabulary: the input and result of each activity the
// workflows run. The workflows and the activities both speak it, so a step's shape is written
// once, beside the vocabulary (shop) and below the code that runs the step (package
// activities, with its Postgres and Redis clients).
package steps

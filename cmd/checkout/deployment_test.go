package main

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
)

// TestSetCurrentWaitsForEveryTaskQueueOfTheNewBuild: a deploy script makes a build current
// right after starting its workers, and Temporal refuses while they have polled only some
// of the current build's task queues (scale's rolling deploy failed on it once). Those
// refusals are waited out; any other failed precondition is answered at once.
func TestSetCurrentWaitsForEveryTaskQueueOfTheNewBuild(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	notYet := []error{
		serviceerror.NewNotFound("no Worker Deployment found with name 'checkout'"),
		serviceerror.NewFailedPrecondition("proposed current version 'checkout:build-b' is missing active task queues from the current version; these would become unversioned if it is set as the current version"),
	}
	calls := 0
	err := untilPolled(t.Context(), time.Minute, logger, func() error {
		calls++
		if calls <= len(notYet) {
			return notYet[calls-1]
		}
		return nil
	})
	if err != nil || calls != len(notYet)+1 {
		t.Fatalf("untilPolled: %v after %d calls, want success on call %d", err, calls, len(notYet)+1)
	}

	other := serviceerror.NewFailedPrecondition("ManagerIdentity 'ops' is set and does not match user identity 'ci'")
	calls = 0
	err = untilPolled(t.Context(), time.Minute, logger, func() error { calls++; return other })
	if !errors.Is(err, other) || calls != 1 {
		t.Fatalf("untilPolled on %v: %v after %d calls, want it at once", other, err, calls)
	}
}

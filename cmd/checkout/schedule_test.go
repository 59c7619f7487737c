package main

import (
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A Schedule created by an earlier release takes the interval this release asks for (review
// L10: ensureSchedule ignored an existing Schedule, so a changed interval never reached it).
func TestEnsureScheduleUpdatesAnExistingSchedule(t *testing.T) {
	srv := testenv.DevServer(t, workflows.SearchAttributeTypes)
	c := srv.Client()
	id := testenv.RandomID("sched-")
	if err := ensureSchedule(t.Context(), c, id, time.Hour, workflows.ReconcileStock, activities.ReconcileStockInput{}); err != nil {
		t.Fatal(err)
	}
	if err := ensureSchedule(t.Context(), c, id, 7*time.Minute, workflows.ReconcileStock, activities.ReconcileStockInput{}); err != nil {
		t.Fatal(err)
	}
	d, err := c.ScheduleClient().GetHandle(t.Context(), id).Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Schedule.Spec.Intervals; len(got) != 1 || got[0].Every != 7*time.Minute {
		t.Errorf("schedule intervals %+v, want every 7m", got)
	}
}

package worker

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
)

// A worker without a build id is unversioned (the SDK sends no deployment and no behaviour);
// with one, it is that version of the deployment and its sagas are pinned by default.
func TestABuildIDTurnsVersioningOnWithSagasPinned(t *testing.T) {
	if got := (Build{Deployment: DefaultDeployment}).deploymentOptions(); got != (sdkworker.DeploymentOptions{}) {
		t.Errorf("without a build id: %+v, want no deployment options", got)
	}
	got := Build{Deployment: DefaultDeployment, ID: "3f2c1ab"}.deploymentOptions()
	want := sdkworker.DeploymentOptions{UseVersioning: true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: "checkout", BuildID: "3f2c1ab"},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned}
	if got != want {
		t.Errorf("build 3f2c1ab: %+v, want %+v", got, want)
	}
}

// Every workflow takes the worker's default behaviour (pinned) except Refund, which waits for
// support longer than a build is kept and so auto-upgrades.
func TestOnlyRefundAutoUpgrades(t *testing.T) {
	var r behaviours
	Register(&r, &activities.Activities{})
	if len(r.of) < 2 {
		t.Fatalf("registered workflows %v", r.of)
	}
	for name, b := range r.of {
		want := workflow.VersioningBehaviorUnspecified // the worker's default: pinned
		if name == "Refund" {
			want = workflow.VersioningBehaviorAutoUpgrade
		}
		if b != want {
			t.Errorf("%s registers behaviour %v, want %v", name, b, want)
		}
	}
}

// behaviours records each workflow's registered versioning behaviour by its short name; the
// registry's other methods, which Register does not call, are the nil interface's.
type behaviours struct {
	sdkworker.Registry
	of map[string]workflow.VersioningBehavior
}

func (r *behaviours) RegisterWorkflow(w any) {
	r.RegisterWorkflowWithOptions(w, workflow.RegisterOptions{})
}

func (r *behaviours) RegisterWorkflowWithOptions(w any, o workflow.RegisterOptions) {
	if r.of == nil {
		r.of = map[string]workflow.VersioningBehavior{}
	}
	name := runtime.FuncForPC(reflect.ValueOf(w).Pointer()).Name()
	r.of[name[strings.LastIndex(name, ".")+1:]] = o.VersioningBehavior
}

func (r *behaviours) RegisterActivityWithOptions(any, activity.RegisterOptions) {}

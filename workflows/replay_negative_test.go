package workflows_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The replay test must be able to fail: a saga changed without workflow.GetVersion, here one
// with a timer added before its first step, is refused on a recorded history (as sdk-go's
// own bad-history tests check). If this passes while TestReplayRecordedHistories would also
// pass on such a change, the replay test guards nothing.
func TestReplayRefusesASagaChangedWithoutAVersion(t *testing.T) {
	changed := func(ctx workflow.Context, in workflows.Input) (shop.View, error) {
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return shop.View{}, err
		}
		return workflows.Checkout(ctx, in)
	}
	for _, name := range []string{"confirmed", "out_of_stock", "expired"} {
		t.Run(name, func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: "Checkout"})
			logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})))
			err := r.ReplayWorkflowHistoryFromJSONFile(logger, historyFile(name))
			t.Logf("replay refused: %v", err)
			// TMPRL1100 is the SDK's code for a nondeterminism error (whatever its wording).
			if err == nil || !strings.Contains(err.Error(), "TMPRL1100") && !strings.Contains(strings.ToLower(err.Error()), "nondetermin") {
				t.Errorf("replaying %s with a saga that starts with an extra timer: %v; want a nondeterminism error", name, err)
			}
		})
	}
}

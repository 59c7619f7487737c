package workflows

import "strconv"

// TaskQueue is where checkout workflows and their activities run.
const TaskQueue = "checkout"

// TaskQueuePartitions is how many partitions the product asks the Temporal server to split
// TaskQueue into: one. Temporal's default of four spreads a burst's workflow tasks over
// partitions that may have no poller waiting, and such a task waits there. In 16 benchmark
// runs of each (bench -e2e-only, 2 cores), four partitions stalled every workflow task then
// waiting for about 2 s in 5 of 32 phases; one partition never did. A partition is served by
// one matching host, so a deployment whose task rate outgrows one raises both settings
// (write partitions first, then read once the extra ones drained), with more pollers.
const TaskQueuePartitions = 1

// PartitionConfig are the dynamic-config values that give a server's task queues n
// partitions, as `temporal server start-dev --dynamic-config-value` takes them. The product's
// are PartitionConfig(TaskQueuePartitions); docker-compose.yml sets the same, for TaskQueue only.
func PartitionConfig(n int) []string {
	return []string{"matching.numTaskqueueReadPartitions=" + strconv.Itoa(n), "matching.numTaskqueueWritePartitions=" + strconv.Itoa(n)}
}

// DevServerFlags are the `temporal server start-dev` flags of a dev server that runs the
// product as it is meant to run: the contract's search attributes, PartitionConfig, and the
// search-attribute cache a real server keeps. The CLI turns that cache off
// (system.forceSearchAttributesCacheRefreshOnRead=true) so that attributes added while it runs
// show at once, and pays a read of SQLite for every attribute it checks: about 3.6 ms of the
// dev server's CPU per checkout in the benchmark. The product's attributes are written into
// the namespace before the server starts (--search-attribute), so the cache already has them.
// And eager activities (system.enableActivityEagerExecution, off in Temporal's defaults): the
// steps that end a checkout unpaid are regular activities, which then start in the answer to
// the workflow task that scheduled them, without a trip through matching (an out-of-stock
// saga's state transitions fell from 82.8 to 51.8 in e2e/cost_test.go). And the Web UI's
// workflow Pause (frontend.WorkflowPauseEnabled, off in Temporal's defaults), which support
// meets in production: the API answers a paused checkout from Postgres (api.CheckoutView's
// Paused), and e2e's console test presses it on every state.
func DevServerFlags() []string {
	var flags []string
	for _, k := range SearchAttributes {
		// The type's String is the CLI's name for it: Keyword, KeywordList, Int, Datetime, Bool.
		flags = append(flags, "--search-attribute", k.GetName()+"="+k.GetValueType().String())
	}
	for _, kv := range append(PartitionConfig(TaskQueuePartitions), "system.forceSearchAttributesCacheRefreshOnRead=false", "system.enableActivityEagerExecution=true",
		"frontend.WorkflowPauseEnabled=true") {
		flags = append(flags, "--dynamic-config-value", kv)
	}
	return flags
}

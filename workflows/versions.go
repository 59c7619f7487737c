package workflows

// The workflow.GetVersion change ids, every one of the package. A change that adds, removes or
// reorders a command asks workflow.GetVersion(ctx, id, workflow.DefaultVersion, 1): a run that
// met the code before the change replays the old branch, a new one takes the new. The id is
// written into the history of every run that asked (a Version marker), so its string never
// changes and a retired id is never reused: a new change gets a new constant here, and its
// line in versions_test.go (docs/saga-changes.md).
const (
	// The Checkout saga.

	// endStepsChange names the change that made the ending steps regular activities (the
	// outcome record, then every release or forfeit at once) instead of local activities in
	// turn (checkout.end, undo.go).
	endStepsChange = "end-steps-as-activities"

	// pendingPaymentsChange names the change that takes the payments already waiting in the
	// channel before the timer or a cancel update (see awaitPayment). It is asked for only when
	// the two are ready together, so only sagas that meet that race carry its marker.
	pendingPaymentsChange = "pending-payments-before-an-end"

	// adoptRefundsOrphansChange names the change that refunds the orphan payments (recorded
	// before their cart was posted) of a cart whose end Postgres already had (adoptEnded): they
	// are not that end's order. Runs that adopted an end before it left them alone.
	adoptRefundsOrphansChange = "adopt-refunds-orphans"

	// paymentKeysChange names the change that keys the saga's memory of payments (seenEvents,
	// seenPaid) by provider and id, as Postgres keys payment events. Event ids and payment refs
	// are each provider's own: two providers that number them alike would have one's payment
	// dropped as a repeat of the other's. It is asked for at the first payment a saga meets, so
	// sagas that met one before the change keep keying by id alone.
	paymentKeysChange = "payment-keys-by-provider"

	// verifiedPaymentsChange names the change that asks Postgres whether a verified event
	// recorded each payment event signalled (VerifyPayment) before it changes the checkout. A
	// signal sent from anywhere else (the Web UI, the CLI, any Temporal client) is flagged and
	// ignored: before it, such a succeeded signal ended the checkout failed at its confirm,
	// and a canceled or failed one ended it payment_failed. Sagas of an older shape ask it at
	// their first payment event.
	verifiedPaymentsChange = "verified-payment-events"

	// refundsChange names the change that starts a refund on a disconnected context when the
	// workflow has been cancelled (startRefunds). Before it, a refund queued in the workflow
	// task that also cancelled the workflow was started on the cancelled context: the SDK
	// refused the child at once, and the money was kept with no order and no refund. It is
	// asked for only then, so only sagas that met that race carry its marker.
	refundsChange = "refunds-outlive-cancellation"

	// refundWhileEndingChange names the change that takes the payments arriving while a
	// checkout's ending steps run (refundWhileEnding), refunding them at once. Before it, they
	// waited in the channel until the end was recorded: for as long as a step support paused
	// stayed paused, the money was kept. It is asked for only when such a payment arrives.
	refundWhileEndingChange = "refund-while-ending"

	// The ReconcileStock workflow.

	// reconcileStockRefunds names the change that starts, in the run that settled them, the
	// refunds of the payments of checkouts whose saga closed without an end
	// (startSettledRefunds). Runs recorded before it left those payments to the orphan sweep.
	reconcileStockRefunds = "reconcile-stock-starts-refunds"

	// The Refund workflow.

	// refundBoundedHistory names the change to the bounded refund loop (continue-as-new,
	// search attributes and Postgres written only on change). Refunds started before it replay
	// the old unbounded loop unchanged.
	refundBoundedHistory = "refund-bounded-history"

	// The ReconcilePayments workflow.

	// reconcilePages names the change to paging: a run asks about one page and continues as
	// new with the next, asking about the page's checkouts reconcileParallel at a time. Runs
	// recorded before it list at most reconcileLimit ids and ask one at a time.
	reconcilePages = "reconcile-pages"

	// reconcileEveryPayment names the change to delivering every succeeded payment of a
	// checkout, not only the first the provider lists.
	reconcileEveryPayment = "reconcile-every-payment"

	// reconcileKeepsOrderPayments names the change to asking Postgres about the payments found
	// for a checkout that ended unpaid before refunding them. Runs recorded before it refund
	// every one.
	reconcileKeepsOrderPayments = "reconcile-keeps-order-payments"

	// reconcileSkipsRefunding names the change to asking Postgres about the payments found
	// before they are delivered. Runs recorded before it deliver every one.
	reconcileSkipsRefunding = "reconcile-skips-refunding"
)

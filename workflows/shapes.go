package workflows

// The shapes of the Checkout saga (Input.Shape). A workflow.GetVersion that every new saga
// asks costs every checkout's history two events for good, a Version marker and an upsert of
// the TemporalChangeVersion search attribute: the SDK writes both the first time a run asks.
// A change that every new saga takes is carried by the input instead: StartOperation starts
// new sagas at NewestShape, and only a saga started before the shape (its Shape lower) asks
// the change's GetVersion, as it did. The SDK's replay skips Version markers and their
// upserts, so a saga an older worker ran, which asked, replays on a newer one, which does
// not. A shape's number is in the input of every saga started at it: it never changes, and a
// new shape takes the next one.
const (
	// shapePaymentKeys: payments are keyed by provider and id from the start
	// (paymentKeysChange), without asking.
	shapePaymentKeys = 1

	// shapeVerifiedPayments: every payment event signalled is verified against Postgres
	// before it changes anything (verifiedPaymentsChange), without asking.
	shapeVerifiedPayments = 2

	// NewestShape is the shape new sagas start at.
	NewestShape = shapeVerifiedPayments
)

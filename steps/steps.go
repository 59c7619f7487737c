// Package steps is the saga's step vocabulary: the name each activity is registered and
// called under, and the input and result of each. The workflows call a step by its name and
// the worker registers the activity under the same name, so the saga never links the code
// that runs a step (package activities, with its Postgres and Redis clients).
//
// A name is part of every recorded history: a run replays only while its steps keep their
// names. Each name is the activity's method name, the name Temporal gave a method value
// before the saga called steps by name, so histories recorded either way replay.
package steps

// The steps, by the name the worker registers each activity under.
const (
	// The checkout saga's steps.
	RecordCheckout = "RecordCheckout"
	ReserveStock   = "ReserveStock"
	ReleaseStock   = "ReleaseStock"
	CommitStock    = "CommitStock"
	ForfeitStock   = "ForfeitStock"
	ConfirmOrder   = "ConfirmOrder"
	RecordOutcome  = "RecordOutcome"
	VerifyPayment  = "VerifyPayment"

	// Refunds, reconciliation and settlement.
	RefundPayment         = "RefundPayment"
	RecordRefund          = "RecordRefund"
	FindSucceededPayment  = "FindSucceededPayment"
	FindSucceededPayments = "FindSucceededPayments"
	ReadPaymentFates      = "ReadPaymentFates"
	ListWorkflowIDs       = "ListWorkflowIDs"
	ListWorkflowPage      = "ListWorkflowPage"
	ClaimStaleOrphans     = "ClaimStaleOrphans"
	ReconcileStock        = "ReconcileStock"
	SettleCheckout        = "SettleCheckout"
)

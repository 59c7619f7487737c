package store

// The statements whose plans TestPaymentQuestionsReadEventsByIndex and
// TestACustomersOpenCheckoutsAreCountedWithoutTheirHistory read.
var (
	PaymentVerifiedSQL = paymentVerifiedSQL
	ConfirmOrderSQL    = confirmOrderSQL
	OpenCheckoutsSQL   = openCheckoutsSQL
)

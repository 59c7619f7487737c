package store

// The statements whose plans TestPaymentQuestionsReadEventsByIndex reads.
var (
	PaymentVerifiedSQL = paymentVerifiedSQL
	ConfirmOrderSQL    = confirmOrderSQL
)

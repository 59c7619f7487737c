package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// signWebhook builds a Stripe payment_intent event for a checkout, signs it the way Stripe
// does (Stripe-Signature: t=...,v1=HMAC-SHA256) with the local secret, and POSTs it to the API,
// so a newcomer can pay a checkout without a Stripe account.
func signWebhook(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sign-webhook", flag.ContinueOnError)
	checkoutID := fs.String("checkout", "", "checkout (cart) id to pay (required)")
	amount := fs.Int64("amount", 0, "amount in cents (required; must match the checkout to confirm it)")
	currency := fs.String("currency", "usd", "currency")
	typ := fs.String("type", "payment_intent.succeeded", "event type: payment_intent.succeeded, payment_intent.payment_failed or payment_intent.canceled")
	eventID := fs.String("event-id", "", "event id (default: random); repeat one to test deduplication")
	target := fs.String("url", "http://127.0.0.1:8080/v1/webhooks/stripe", "webhook endpoint")
	secret := fs.String("secret", envOr("STRIPE_WEBHOOK_SECRET", devWebhookSecret), "signing secret")
	printOnly := fs.Bool("print", false, "print the body and Stripe-Signature header instead of sending")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *checkoutID == "" || *amount <= 0 {
		fs.Usage()
		return fmt.Errorf("-checkout and a positive -amount are required")
	}
	if *eventID == "" {
		*eventID = "evt_local_" + randomHex(8)
	}
	intentID := "pi_local_" + randomHex(8)
	body, err := json.Marshal(map[string]any{
		"id": *eventID, "object": "event", "type": *typ, "api_version": "2025-01-27.acacia",
		"created": time.Now().Unix(), "livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id": intentID, "object": "payment_intent", "amount": *amount, "amount_received": *amount,
			"currency": *currency, "metadata": map[string]string{"checkout_id": *checkoutID},
		}},
	})
	if err != nil {
		return err
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: *secret, Timestamp: time.Now()})
	if *printOnly {
		fmt.Printf("Stripe-Signature: %s\n%s\n", signed.Header, body)
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post webhook: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s\n%s\n", resp.Status, *eventID, answer)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

-- Payment events by payment. Every confirm and refund asks whether a verified event recorded
-- the payment (store.PaymentVerified, store.ConfirmOrder); the refund's question names no
-- checkout, so without this index Postgres read the whole table for it: 46 ms at 300,000
-- events, and a flash sale records one or more per buyer.
--
-- Building it blocks writes to payment_events (webhooks) while it runs. On a large table,
-- build it first without blocking, by hand, and this migration then skips it:
--   CREATE INDEX CONCURRENTLY payment_events_payment_idx ON payment_events (provider, payment_ref);
CREATE INDEX IF NOT EXISTS payment_events_payment_idx ON payment_events (provider, payment_ref);

---- create above / drop below ----

DROP INDEX IF EXISTS payment_events_payment_idx;

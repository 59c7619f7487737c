-- outcome: what a payment event means for its checkout (succeeded, failed, canceled), as
-- the API understood it when it verified the event; NULL for types the product ignores.
-- A checkout recorded after its payment's webhook (an orphan) reads its payments by it.
ALTER TABLE payment_events ADD COLUMN outcome text;

---- create above / drop below ----

ALTER TABLE payment_events DROP COLUMN outcome;

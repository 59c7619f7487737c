-- Each checkout keeps the fingerprint of the request that created it: the body's hash, its
-- Idempotency-Key and its caller (the API's callerScope: "client/<name>", "customer/<id>",
-- or '' when neither authenticates). A POST of the cart id is compared with it before any
-- view or secret is shown, also after Temporal's retention dropped the saga that had it.
-- Checkouts recorded before this migration have none ('') and answer a POST of their id
-- with 409 checkout_exists; their buyers still read them with GET and their secret.
ALTER TABLE checkouts
    ADD COLUMN request_hash text NOT NULL DEFAULT '',
    ADD COLUMN idempotency_key text NOT NULL DEFAULT '',
    ADD COLUMN caller text NOT NULL DEFAULT '';

---- create above / drop below ----

ALTER TABLE checkouts DROP COLUMN request_hash, DROP COLUMN idempotency_key, DROP COLUMN caller;

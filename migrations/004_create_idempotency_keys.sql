-- idempotency_keys: which request body each Idempotency-Key of POST /v1/checkouts belongs
-- to, across carts. The contract binds a key to one body for at least 24 hours; the API
-- keeps a key for IDEMPOTENCY_KEY_RETENTION_HOURS (default 168: 7 days, the life of a hold
-- tombstone) and deletes older rows. request_hash covers the cart id, customer, items and
-- payment window (api.requestHash), so the same cart sent again hashes the same.
CREATE TABLE idempotency_keys (
    key           text        PRIMARY KEY,
    cart_id       text        NOT NULL,
    request_hash  text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- Pruning deletes by age.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);

---- create above / drop below ----

DROP TABLE idempotency_keys;

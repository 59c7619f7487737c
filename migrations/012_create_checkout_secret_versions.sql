-- A checkout's secret version: support revokes one checkout's secret by moving it to the next
-- version, and the API folds the version into the secret's HMAC (api.CheckoutSecret), so the
-- old secret stops opening the checkout and no other buyer is logged out. A cart with no row
-- is on version 0, the secret every checkout had before this table. A table of its own, not
-- a column of checkouts: a cart still waiting in the room, not recorded yet, can be revoked
-- too, and a secret-only GET reads one primary key of a table that holds only the revoked.
CREATE TABLE checkout_secret_versions (
    checkout_id text        PRIMARY KEY,
    version     bigint      NOT NULL CHECK (version > 0),
    revoked_at  timestamptz NOT NULL DEFAULT now()
);

---- create above / drop below ----

DROP TABLE checkout_secret_versions;

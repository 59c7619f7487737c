-- Versions for operators' compare-and-set, a record of every change of stock, and the
-- Redis generation Postgres last saw (see lua/doc.go, "Redis going back in time").

-- version: bumped whenever a field of the SKU changes (an operator's PUT or adjustment, a
-- sale taking units from on_hand); the strong ETag of GET and PUT /v1/inventory/{sku}.
-- redis_gen: the highest gen of the SKU's Redis copy the reconciler wrote; a Redis showing a
-- lower one went back in time. Changing it alone is no change of the SKU.
ALTER TABLE skus ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE skus ADD COLUMN redis_gen bigint NOT NULL DEFAULT 0;

CREATE FUNCTION skus_bump_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.on_hand, NEW.sold, NEW.price_cents, NEW.currency, NEW.max_per_order)
       IS DISTINCT FROM (OLD.on_hand, OLD.sold, OLD.price_cents, OLD.currency, OLD.max_per_order) THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER skus_version BEFORE UPDATE ON skus
    FOR EACH ROW EXECUTE FUNCTION skus_bump_version();

-- stock_changes: one row per operator change of a SKU (PUT or adjustment), written in the
-- transaction that changes on_hand. change_id names the change's hold in Redis
-- (holds:{sku} field "~<change_id>"), so the reconciler can finish a change whose Redis step
-- failed. idempotency_key is unique: an adjustment retried with its key finds its row and
-- answers response again.
CREATE TABLE stock_changes (
    change_id        text        PRIMARY KEY,
    sku              text        NOT NULL REFERENCES skus (sku),
    delta_on_hand    bigint      NOT NULL,
    reason           text        NOT NULL,
    idempotency_key  text        UNIQUE,
    request_hash     text,
    response         jsonb,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stock_changes_sku_idx ON stock_changes (sku, created_at);

---- create above / drop below ----

DROP TABLE stock_changes;
DROP TRIGGER skus_version ON skus;
DROP FUNCTION skus_bump_version();
ALTER TABLE skus DROP COLUMN redis_gen;
ALTER TABLE skus DROP COLUMN version;

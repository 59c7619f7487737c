-- The record of stock, checkouts, orders and payments. Redis holds the fast copy of
-- availability; this schema is the source of truth for what was stocked and sold.

-- skus: one row per sellable SKU. on_hand counts units not yet sold; sold counts units
-- sold. Every unit ever stocked is on_hand + sold.
CREATE TABLE skus (
    sku            text        PRIMARY KEY,
    on_hand        bigint      NOT NULL CHECK (on_hand >= 0),
    sold           bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    price_cents    bigint      NOT NULL CHECK (price_cents >= 0),
    currency       text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    max_per_order  bigint      NOT NULL CHECK (max_per_order >= 1),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- checkouts: one row per saga, written when the saga starts and updated when it ends.
CREATE TABLE checkouts (
    checkout_id   text        PRIMARY KEY,
    customer_id   text        NOT NULL,
    status        text        NOT NULL,
    currency      text        NOT NULL,
    amount_cents  bigint      NOT NULL CHECK (amount_cents >= 0),
    expires_at    timestamptz,
    reason        text,
    order_id      text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz
);
CREATE INDEX checkouts_customer_idx ON checkouts (customer_id, created_at);

CREATE TABLE checkout_items (
    checkout_id       text   NOT NULL REFERENCES checkouts (checkout_id),
    sku               text   NOT NULL REFERENCES skus (sku),
    quantity          bigint NOT NULL CHECK (quantity >= 1),
    unit_price_cents  bigint NOT NULL CHECK (unit_price_cents >= 0),
    PRIMARY KEY (checkout_id, sku)
);

-- orders: a confirmed checkout. UNIQUE (checkout_id) is what makes confirmation
-- idempotent: a retried ConfirmOrder finds the order it already wrote.
CREATE TABLE orders (
    order_id          text        PRIMARY KEY,
    checkout_id       text        NOT NULL UNIQUE REFERENCES checkouts (checkout_id),
    customer_id       text        NOT NULL,
    amount_cents      bigint      NOT NULL,
    currency          text        NOT NULL,
    payment_provider  text        NOT NULL,
    payment_ref       text        NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_lines (
    order_id          text   NOT NULL REFERENCES orders (order_id),
    sku               text   NOT NULL REFERENCES skus (sku),
    quantity          bigint NOT NULL CHECK (quantity >= 1),
    unit_price_cents  bigint NOT NULL,
    PRIMARY KEY (order_id, sku)
);

-- payment_events: every verified provider event, recorded once. delivered_at is set once
-- the event reached its saga, so a redelivery that was recorded but not delivered is
-- delivered again, and one that was delivered changes nothing.
CREATE TABLE payment_events (
    provider      text        NOT NULL,
    event_id      text        NOT NULL,
    event_type    text        NOT NULL,
    checkout_id   text,
    payment_ref   text,
    amount_cents  bigint,
    currency      text,
    payload       jsonb       NOT NULL,
    disposition   text        NOT NULL DEFAULT 'pending',
    received_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at  timestamptz,
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX payment_events_checkout_idx ON payment_events (checkout_id);

-- inventory_ledger: append-only history of every change to on_hand and sold.
CREATE TABLE inventory_ledger (
    id             bigserial   PRIMARY KEY,
    sku            text        NOT NULL REFERENCES skus (sku),
    delta_on_hand  bigint      NOT NULL,
    delta_sold     bigint      NOT NULL,
    reason         text        NOT NULL,
    checkout_id    text,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inventory_ledger_sku_idx ON inventory_ledger (sku, id);

CREATE FUNCTION inventory_ledger_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inventory_ledger is append-only: % refused', TG_OP;
END;
$$;

CREATE TRIGGER inventory_ledger_no_update_or_delete
    BEFORE UPDATE OR DELETE ON inventory_ledger
    FOR EACH ROW EXECUTE FUNCTION inventory_ledger_append_only();

CREATE TRIGGER inventory_ledger_no_truncate
    BEFORE TRUNCATE ON inventory_ledger
    FOR EACH STATEMENT EXECUTE FUNCTION inventory_ledger_append_only();

---- create above / drop below ----

DROP TABLE inventory_ledger;
DROP FUNCTION inventory_ledger_append_only();
DROP TABLE payment_events;
DROP TABLE order_lines;
DROP TABLE orders;
DROP TABLE checkout_items;
DROP TABLE checkouts;
DROP TABLE skus;

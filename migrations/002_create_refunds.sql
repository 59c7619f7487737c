-- refunds: money the product gives back (a payment after its checkout ended, a second
-- payment, a wrong amount). One row per refund, keyed by the idempotency key sent to the
-- provider, so the record and the provider agree on what "this refund" is.
CREATE TABLE refunds (
    refund_key          text        PRIMARY KEY,
    checkout_id         text        NOT NULL,
    provider            text        NOT NULL,
    payment_ref         text        NOT NULL,
    amount_cents        bigint      NOT NULL,
    currency            text        NOT NULL,
    reason              text        NOT NULL,
    status              text        NOT NULL,
    provider_refund_id  text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refunds_checkout_idx ON refunds (checkout_id);

---- create above / drop below ----

DROP TABLE refunds;

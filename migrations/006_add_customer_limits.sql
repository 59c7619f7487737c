-- Per-customer limits (docs/contract.md, "Inventory"; docs/api.md, "Abuse limits").
--
-- max_per_customer: the units of the SKU one customer may hold and buy across all their open
-- and confirmed checkouts; 0 means no limit. RecordCheckout enforces it, and the cap on a
-- customer's open checkouts, in the transaction that records the checkout, under a lock per
-- customer, so concurrent checkouts of one customer are judged one at a time.
ALTER TABLE skus ADD COLUMN max_per_customer bigint NOT NULL DEFAULT 0
    CHECK (max_per_customer BETWEEN 0 AND 1000000);

-- The limits' sums read a customer's checkouts by checkouts_customer_idx (001).

-- The limit is a field of the SKU: changing it changes the ETag.
CREATE OR REPLACE FUNCTION skus_bump_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.on_hand, NEW.sold, NEW.price_cents, NEW.currency, NEW.max_per_order, NEW.max_per_customer)
       IS DISTINCT FROM (OLD.on_hand, OLD.sold, OLD.price_cents, OLD.currency, OLD.max_per_order, OLD.max_per_customer) THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END;
$$;

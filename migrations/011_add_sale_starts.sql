-- A SKU's scheduled drop: nothing of it sells before sale_starts_at. Carts that arrive before
-- wait for the start, holding nothing, and at the start get their places in the waiting room
-- in a random order, ahead of every later arrival (api's door, lua/room_enter.lua). NULL: on
-- sale now.
ALTER TABLE skus ADD COLUMN sale_starts_at timestamptz;

-- The start is a field of the SKU: changing it changes the ETag.
CREATE OR REPLACE FUNCTION skus_bump_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.on_hand, NEW.sold, NEW.price_cents, NEW.currency, NEW.max_per_order, NEW.max_per_customer, NEW.sale_starts_at)
       IS DISTINCT FROM (OLD.on_hand, OLD.sold, OLD.price_cents, OLD.currency, OLD.max_per_order, OLD.max_per_customer, OLD.sale_starts_at) THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END;
$$;

---- create above / drop below ----

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
ALTER TABLE skus DROP COLUMN sale_starts_at;

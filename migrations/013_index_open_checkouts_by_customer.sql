-- A customer's open checkouts. Every checkout's record counts them against the cap on open
-- checkouts (store.InsertCheckout), and the waiting room's door counts them with the
-- customer's carts in line (store.RecordedCheckouts), once per POST. Through
-- checkouts_customer_idx (001) Postgres read every checkout the customer ever had to find
-- the few still open: 13.7 ms for a customer with 20,000 past checkouts in a table of a
-- million, against 0.5 ms through this index, which holds only open checkouts (264 kB there,
-- beside the 49 MB of checkouts_customer_idx).
--
-- Building it blocks writes to checkouts while it runs. On a large table, build it first
-- without blocking, by hand, and this migration then skips it:
--   CREATE INDEX CONCURRENTLY checkouts_open_customer_idx ON checkouts (customer_id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS checkouts_open_customer_idx ON checkouts (customer_id) WHERE ended_at IS NULL;

---- create above / drop below ----

DROP INDEX IF EXISTS checkouts_open_customer_idx;

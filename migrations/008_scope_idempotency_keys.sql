-- Each caller's Idempotency-Keys are its own: scope is the caller (the API's callerScope:
-- "client/<name>" for a shop backend's client token, "customer/<id>" for a buyer's identity
-- token, '' when neither authenticates, as in the local stack). One global namespace let any
-- caller take a key equal to another's future cart id and make that cart's POST 422 for the
-- retention. Keys written before this migration stay in scope '' and expire as before.
ALTER TABLE idempotency_keys ADD COLUMN scope text NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (scope, key);

---- create above / drop below ----

-- One row per key again: the newest binding of each key wins.
DELETE FROM idempotency_keys k WHERE EXISTS (
    SELECT 1 FROM idempotency_keys n WHERE n.key = k.key AND (n.created_at, n.scope) > (k.created_at, k.scope));
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys DROP COLUMN scope;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (key);

-- The client (a shop backend) that started each cart, when client authentication is on
-- (CLIENT_TOKENS): a client reads and cancels only its own carts. Written by the API before
-- it starts the saga, so a cart id is bound to one client from its first request.
CREATE TABLE checkout_clients (
    checkout_id text        PRIMARY KEY,
    client_id   text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Durable state of a delivery engine (see impl/store.go).
--
-- Every instant is BIGINT Unix nanoseconds handed in by the engine's injected
-- clock (0 = the zero time), never now(): the same calls must give
-- byte-identical results here and in the in-memory backend.
--
-- Every identifier column is COLLATE "C" so that ORDER BY and row comparisons
-- are bytewise, exactly like Go's string comparison.

-- Resume cursors: one per stream (subscriber = '') or per (subscriber, source).
CREATE TABLE cursors (
    stream     text COLLATE "C" NOT NULL,
    subscriber text COLLATE "C" NOT NULL,
    pos_major  bigint NOT NULL,
    pos_minor  bigint NOT NULL,
    pos_id     text COLLATE "C" NOT NULL,
    -- NULL for an empty token: it reads back as nil.
    token      bytea,
    updated_at bigint NOT NULL,
    PRIMARY KEY (stream, subscriber)
);

-- The per-subscriber queue, including leased (in-flight) and dead messages.
CREATE TABLE messages (
    subscriber      text COLLATE "C" NOT NULL,
    event_id        text COLLATE "C" NOT NULL,
    stream          text COLLATE "C" NOT NULL,
    pos_major       bigint NOT NULL,
    pos_minor       bigint NOT NULL,
    pos_id          text COLLATE "C" NOT NULL,
    payload         bytea, -- NULL for an empty payload: it reads back as nil
    created_at      bigint NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at bigint NOT NULL,
    lease_owner     text COLLATE "C" NOT NULL DEFAULT '',
    lease_until     bigint NOT NULL DEFAULT 0,
    dead            boolean NOT NULL DEFAULT false,
    last_error      text NOT NULL DEFAULT '',
    PRIMARY KEY (subscriber, event_id)
);

-- Queue order (subscriber, created_at, event_id): claim, listing and the
-- per-subscriber retention trim all walk it.
CREATE INDEX messages_queue_order_idx ON messages (subscriber, created_at, event_id);

-- The TTL sweep deletes by age across all subscribers.
CREATE INDEX messages_created_at_idx ON messages (created_at);

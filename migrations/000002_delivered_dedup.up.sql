-- Snapshot-style delivered state per (app, source) (seed 002).
CREATE TABLE delivered (
    app     text COLLATE "C" NOT NULL,
    source  text COLLATE "C" NOT NULL,
    item_id text COLLATE "C" NOT NULL,
    version text NOT NULL,
    PRIMARY KEY (app, source, item_id)
);

-- The receiver's seen-event cache: seen_at is Unix nanoseconds from the
-- receiver's clock.
CREATE TABLE dedup (
    subscriber text COLLATE "C" NOT NULL,
    event_id   text COLLATE "C" NOT NULL,
    seen_at    bigint NOT NULL,
    PRIMARY KEY (subscriber, event_id)
);

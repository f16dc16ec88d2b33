-- Retention drops per subscriber and rule (seed 003: "Track ... deletion
-- counts (by TTL vs by limit)"), counted by the statement that deletes the
-- rows, so a count is durable exactly when its deletion is.
CREATE TABLE retention_drops (
    subscriber text COLLATE "C" NOT NULL,
    rule       text COLLATE "C" NOT NULL, -- 'ttl' or 'cap'
    n          bigint NOT NULL,
    PRIMARY KEY (subscriber, rule)
);

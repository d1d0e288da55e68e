-- Migration 4: each job's history, as `stats-job` shows it and beanstalkd's binlog keeps it.
-- {schema} is replaced by the schema name (a checked identifier) before this runs.

-- delay_ms: the delay given at put or at the last release. The counters: how often the job
-- was reserved, timed out (TTR), released, buried and kicked. Each is as of the job's last
-- durable change, like beanstalkd's binlog: one node alone writes its engine's with each
-- change; nodes sharing the schema (active-active) count them here, in the statements that
-- release, bury, kick and expire jobs (a reserve is counted by the statement that ends it: a
-- job claimed and deleted writes no counter). NULL means 0, so a row that never had one
-- stores nothing for it (the rows of a put, claim, delete life stay as narrow as before), and
-- adding the columns does not rewrite the table. A delayed row whose delay_ms is NULL (from
-- before this migration) reads as delayed by until_ms - created_ms, as it did before.
ALTER TABLE {schema}.jobs
    ADD COLUMN delay_ms bigint CHECK (delay_ms > 0),
    ADD COLUMN reserves bigint CHECK (reserves BETWEEN 1 AND 4294967295),
    ADD COLUMN timeouts bigint CHECK (timeouts BETWEEN 1 AND 4294967295),
    ADD COLUMN releases bigint CHECK (releases BETWEEN 1 AND 4294967295),
    ADD COLUMN buries   bigint CHECK (buries BETWEEN 1 AND 4294967295),
    ADD COLUMN kicks    bigint CHECK (kicks BETWEEN 1 AND 4294967295);

-- put(): as in migration 1, and it records the delay it was given (its local variable renamed:
-- a column is now called delay_ms).
CREATE OR REPLACE FUNCTION {schema}.put(
    tube text, body bytea, delay interval DEFAULT '0', pri bigint DEFAULT 1024, ttr bigint DEFAULT 60
) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    new_id   bigint;
    now_ms   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    wait_ms bigint := ceil(extract(epoch FROM delay) * 1000);
BEGIN
    IF tube IS NULL OR octet_length(tube) NOT BETWEEN 1 AND 200
        OR tube !~ '^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]*$' THEN
        RAISE EXCEPTION 'tickwheel: bad tube name %', tube USING ERRCODE = '22023';
    END IF;
    IF body IS NULL THEN
        RAISE EXCEPTION 'tickwheel: body must not be null' USING ERRCODE = '22004';
    END IF;
    IF wait_ms IS NULL OR wait_ms < 0 THEN
        RAISE EXCEPTION 'tickwheel: delay must not be negative (got %)', delay USING ERRCODE = '22023';
    END IF;
    IF pri IS NULL OR pri NOT BETWEEN 0 AND 4294967295 THEN
        RAISE EXCEPTION 'tickwheel: priority must be in 0..=4294967295 (got %)', pri USING ERRCODE = '22023';
    END IF;
    IF ttr IS NULL OR ttr < 0 OR ttr > 4294967295 THEN
        RAISE EXCEPTION 'tickwheel: ttr must be in 0..=4294967295 seconds (got %)', ttr USING ERRCODE = '22023';
    END IF;
    new_id := nextval('{schema}.foreign_ids');
    INSERT INTO {schema}.jobs (id, tube, priority, ttr_ms, state, until_ms, created_ms, body, delay_ms)
    VALUES (new_id, put.tube, pri, greatest(ttr, 1) * 1000,
            CASE WHEN wait_ms > 0 THEN 1 ELSE 0 END,
            CASE WHEN wait_ms > 0 THEN now_ms + wait_ms ELSE 0 END,
            now_ms, put.body, nullif(wait_ms, 0));
    PERFORM pg_notify('{channel}_put', new_id::text);
    RETURN new_id;
END
$fn$;

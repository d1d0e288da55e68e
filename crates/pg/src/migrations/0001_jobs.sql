-- Migration 1: the job table, the id mark, and the SQL functions for applications.
-- {schema} is replaced by the schema name (a checked identifier) before this runs.

-- state: 0 ready (or reserved: a reservation is not durable), 1 delayed, 2 buried.
-- until_ms: delayed jobs only, Unix milliseconds when the job becomes ready.
-- fillfactor 80 leaves room in each page for HOT updates (release/bury/kick change one row).
CREATE TABLE {schema}.jobs (
    id              bigint PRIMARY KEY,
    tube            text     NOT NULL,
    priority        bigint   NOT NULL CHECK (priority BETWEEN 0 AND 4294967295),
    ttr_ms          bigint   NOT NULL CHECK (ttr_ms >= 0),
    state           smallint NOT NULL CHECK (state IN (0, 1, 2)),
    until_ms        bigint   NOT NULL DEFAULT 0,
    created_ms      bigint   NOT NULL,
    body            bytea    NOT NULL,
    idempotency_key text
) WITH (fillfactor = 80);

-- Delayed jobs by due time: read at start-up and when a node's memory window moves.
CREATE INDEX jobs_due ON {schema}.jobs (until_ms, id) WHERE state = 1;
-- Idempotency keys (nullable; the beanstalkd protocol does not set them).
CREATE UNIQUE INDEX jobs_idempotency ON {schema}.jobs (tube, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- next_id: the exclusive end of the id blocks the engine has reserved (Change::ReserveIds).
CREATE TABLE {schema}.meta (
    key   text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO {schema}.meta (key, value) VALUES ('next_id', 1);

-- Ids of jobs put by SQL: from 2^62 (tickwheel_queue::FOREIGN_ID_BASE), never colliding
-- with the engine's ids, which count up from 1.
CREATE SEQUENCE {schema}.foreign_ids START WITH 4611686018427387904
    MINVALUE 4611686018427387904;

-- put(tube, body, delay, pri, ttr): a job that exists only if the calling transaction commits.
-- The node serving the schema hears of it by NOTIFY (delivered at commit, never on rollback).
-- Returns the job id. delay is rounded up to whole milliseconds (never early); ttr in seconds,
-- below 1 raised to 1 as beanstalkd does.
CREATE FUNCTION {schema}.put(
    tube text, body bytea, delay interval DEFAULT '0', pri bigint DEFAULT 1024, ttr bigint DEFAULT 60
) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    new_id   bigint;
    now_ms   bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    delay_ms bigint := ceil(extract(epoch FROM delay) * 1000);
BEGIN
    IF tube IS NULL OR octet_length(tube) NOT BETWEEN 1 AND 200
        OR tube !~ '^[A-Za-z0-9+/;.$_()][A-Za-z0-9+/;.$_()-]*$' THEN
        RAISE EXCEPTION 'tickwheel: bad tube name %', tube USING ERRCODE = '22023';
    END IF;
    IF body IS NULL THEN
        RAISE EXCEPTION 'tickwheel: body must not be null' USING ERRCODE = '22004';
    END IF;
    IF delay_ms IS NULL OR delay_ms < 0 THEN
        RAISE EXCEPTION 'tickwheel: delay must not be negative (got %)', delay USING ERRCODE = '22023';
    END IF;
    IF pri IS NULL OR pri NOT BETWEEN 0 AND 4294967295 THEN
        RAISE EXCEPTION 'tickwheel: priority must be in 0..=4294967295 (got %)', pri USING ERRCODE = '22023';
    END IF;
    IF ttr IS NULL OR ttr < 0 OR ttr > 4294967295 THEN
        RAISE EXCEPTION 'tickwheel: ttr must be in 0..=4294967295 seconds (got %)', ttr USING ERRCODE = '22023';
    END IF;
    new_id := nextval('{schema}.foreign_ids');
    INSERT INTO {schema}.jobs (id, tube, priority, ttr_ms, state, until_ms, created_ms, body)
    VALUES (new_id, put.tube, pri, greatest(ttr, 1) * 1000,
            CASE WHEN delay_ms > 0 THEN 1 ELSE 0 END,
            CASE WHEN delay_ms > 0 THEN now_ms + delay_ms ELSE 0 END,
            now_ms, put.body);
    PERFORM pg_notify('{channel}_put', new_id::text);
    RETURN new_id;
END
$fn$;

-- delete(id): deletes a job that is not reserved at the node (a reserved job stays with its
-- holder, as beanstalkd's delete from another connection). True if a row was deleted.
CREATE FUNCTION {schema}.delete(id bigint) RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {schema}.jobs j WHERE j.id = delete.id;
    IF FOUND THEN
        PERFORM pg_notify('{channel}_delete', delete.id::text);
        RETURN true;
    END IF;
    RETURN false;
END
$fn$;

-- Migration 2: what several nodes serving one schema at once need (ADR 0008, phase 2).
-- {schema} is replaced by the schema name (a checked identifier) before this runs.
-- A standby-mode node never writes state 3 or the new columns, so phase 1 runs unchanged.

-- The database's clock in whole Unix milliseconds, rounded down: "due" and "lease expired"
-- are decided by it (until_ms <= now_ms() is never early), never by a node's clock.
CREATE FUNCTION {schema}.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
$fn$;

-- state 3: reserved by `holder` (an opaque number the node chooses, e.g. node id and client)
-- until lease_until_ms (database clock). Past the lease the job is ready again for everyone,
-- whether or not a node has swept it back to state 0 yet.
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_state_check CHECK (state IN (0, 1, 2, 3));
ALTER TABLE {schema}.jobs ADD COLUMN holder bigint;
ALTER TABLE {schema}.jobs ADD COLUMN lease_until_ms bigint;
-- Leases by expiry: the sweep that returns the jobs of dead or slow holders reads it.
CREATE INDEX jobs_leases ON {schema}.jobs (lease_until_ms) WHERE state = 3;
-- Buried jobs by tube: what kick reads (cluster-wide).
CREATE INDEX jobs_buried ON {schema}.jobs (tube, id) WHERE state = 2;

-- The nodes serving the schema (active-active): each takes an id and a block of job ids of
-- its own (from meta.next_id) when it starts, and heartbeats.
CREATE TABLE {schema}.nodes (
    id         bigserial PRIMARY KEY,
    ids_from   bigint      NOT NULL,
    ids_to     bigint      NOT NULL,
    started    timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Cluster-wide pauses: a tube whose paused_until_ms is after now_ms() hands out no job.
CREATE TABLE {schema}.tubes (
    name            text PRIMARY KEY,
    paused_until_ms bigint NOT NULL DEFAULT 0
);

-- delete(id) no longer deletes a job a node's client holds (as beanstalkd's delete from
-- another connection answers NOT_FOUND); a lapsed lease is no hold.
CREATE OR REPLACE FUNCTION {schema}.delete(id bigint) RETURNS boolean
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {schema}.jobs j WHERE j.id = delete.id
        AND NOT (j.state = 3 AND j.lease_until_ms > {schema}.now_ms());
    IF FOUND THEN
        PERFORM pg_notify('{channel}_delete', delete.id::text);
        RETURN true;
    END IF;
    RETURN false;
END
$fn$;

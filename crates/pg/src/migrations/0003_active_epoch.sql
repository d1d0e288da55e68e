-- Migration 3: the fence between an active node and the one that takes over from it
-- (standby mode, ADR 0008 phase 1).
-- {schema} is replaced by the schema name (a checked identifier) before this runs.

-- active_epoch: raised by every node that becomes the active one (PgStore::fenced), after it
-- took the active lock and before it reads a single job. Each group commit of an active node
-- reads it FOR SHARE and fails unless it is still the node's own epoch, so the raise waits
-- for the commits the previous active node still had in flight (a killed node's backend
-- finishes its statement after the lock's session ended) and every later one fails: no
-- commit of the old node lands after the new node read the jobs.
INSERT INTO {schema}.meta (key, value) VALUES ('active_epoch', 0);

-- What a fenced-off commit raises (SQLSTATE TW001), so it aborts with a clear message.
CREATE FUNCTION {schema}.fenced_off(epoch bigint) RETURNS integer
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'tickwheel: another node took over schema {schema} (this node''s epoch %, the schema''s %)',
        epoch, (SELECT value FROM {schema}.meta WHERE key = 'active_epoch')
        USING ERRCODE = 'TW001';
END
$fn$;

#!/usr/bin/env python3
"""Where PostgreSQL's time goes during a server_bench run: runs the bench with
pg_stat_statements loaded on its throw-away cluster (TICKWHEEL_PG_SETTINGS), snapshots the
statistics every half second while it runs, and prints the last snapshot (per statement:
calls, rows, total and mean execution time, plans and planning time), the databases'
transactions and tuples, the autovacuums and (HOT) updates of `jobs`, and the CPU seconds of the LISTEN backends
(application_name tickwheel-listen-*) against the other backends, and by connection role (group
commit, node, get_free, LISTEN: from the statements each backend was seen running).
Usage (one PostgreSQL target per run, as for pg_cpu_share.py):
crates/bench/scripts/pg_statements.py -- target/release/server_bench --workload throughput \\
    --targets tw-pg-aa3 --runs 1 --per-conn 40 --phase-limit 40
The numbers cover the run up to the last snapshot (at most 0.5 s before the cluster stops).
"""
import glob, os, subprocess, sys, time

HZ = os.sysconf('SC_CLK_TCK')
PSQL = sorted(glob.glob('/usr/lib/postgresql/*/bin/psql'))[-1:] or ['psql']


def psql(host, port, sql, db='postgres'):
    r = subprocess.run(PSQL + ['-X', '-q', '-A', '-F', '\t', '-t', '-h', host, '-p', port,
                               '-U', 'postgres', '-d', db, '-c', sql],
                       capture_output=True, text=True, timeout=10)
    return r.stdout if r.returncode == 0 else None


def role(name, query):
    """What a backend serves, by its name or the last statement it ran ('' if unknown)."""
    if name.startswith('tickwheel-listen'):
        return 'listen'
    if 'active_epoch' in query or 'pg_notify($1::text, p)' in query:
        return 'group commit'
    if 'id = ANY($1::bigint[])' in query and query.lstrip().startswith('SELECT'):
        return 'get_free'
    return 'node' if query.strip() else ''


def cpu(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            rest = f.read().rsplit(')', 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):  # gone, or read while it exited
        return None


cmd = sys.argv[sys.argv.index('--') + 1:]
env = dict(os.environ)
# Settings given in TICKWHEEL_PG_SETTINGS are kept (added after these).
env['TICKWHEEL_PG_SETTINGS'] = ('-c shared_preload_libraries=pg_stat_statements '
                                '-c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on '
                                + os.environ.get('TICKWHEEL_PG_SETTINGS', '')).strip()
p = subprocess.Popen(cmd, env=env)
host = port = None
last = None
vacuums = '?'
backends = {}  # pid -> (application_name, ticks)
while p.poll() is None:
    time.sleep(0.5)
    if host is None:
        dirs = glob.glob(f'/tmp/tickwheel-pg-{p.pid}-*')
        socks = glob.glob(dirs[0] + '/.s.PGSQL.*') if dirs else []
        socks = [s for s in socks if not s.endswith('.lock')]
        if not socks:
            continue
        host, port = dirs[0], socks[0].rsplit('.', 1)[1]
        if psql(host, port, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements') is None:
            host = None
            continue
    snap = psql(host, port, """
        SELECT calls, rows, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3),
               plans, round(total_plan_time::numeric, 1),
               regexp_replace(left(query, 110), '\\s+', ' ', 'g')
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname LIKE 'bench%' ORDER BY total_exec_time DESC LIMIT 25""")
    dbs = psql(host, port, """
        SELECT sum(xact_commit), sum(tup_returned), sum(tup_fetched), sum(tup_inserted),
               sum(tup_updated), sum(tup_deleted)
        FROM pg_stat_database WHERE datname LIKE 'bench%'""")
    dbname = (psql(host, port, "SELECT datname FROM pg_database WHERE datname LIKE 'bench%' "
                               "ORDER BY oid DESC LIMIT 1") or '').strip()
    if dbname:
        vac = psql(host, port, """SELECT coalesce(sum(autovacuum_count), 0),
            coalesce(sum(autoanalyze_count), 0), coalesce(sum(n_tup_upd), 0),
            coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_user_tables
            WHERE relname = 'jobs'""", db=dbname)
        if vac:
            vacuums = vac.strip().replace('\t', ' / ')
    act = psql(host, port, """SELECT pid, application_name, left(query, 200)
        FROM pg_stat_activity WHERE datname LIKE 'bench%'""")
    if act:
        for line in act.splitlines():
            pid, name, query = (line.split('\t') + ['', ''])[:3]
            t = cpu(pid)
            if t is not None:
                old = backends.get(pid, ('', 0, ''))
                backends[pid] = (name, max(t, old[1]), role(name, query) or old[2])
    if snap is not None and dbs is not None:
        last = (snap, dbs)
if last:
    print('calls\trows\ttotal ms\tmean ms\tplans\tplan ms\tstatement')
    print(last[0], end='')
    print('commits, tuples returned, fetched, inserted, updated, deleted:', last[1].strip())
    listen = sum(t for n, t, _ in backends.values() if n.startswith('tickwheel-listen'))
    other = sum(t for n, t, _ in backends.values() if not n.startswith('tickwheel-listen'))
    print('autovacuums / autoanalyzes / updates / HOT updates of jobs (the last database): '
          f'{vacuums}')
    print(f'backend CPU seconds: LISTEN {listen / HZ:.2f}, others {other / HZ:.2f}')
    roles = {}
    for _, t, r in backends.values():
        n, c = roles.get(r or 'other', (0, 0))
        roles[r or 'other'] = (n + 1, c + t)
    print('backend CPU seconds by role (the statements a connection ran; backends): '
          + ', '.join(f'{r} {c / HZ:.2f} ({n})' for r, (n, c) in sorted(roles.items())))
sys.exit(p.returncode)

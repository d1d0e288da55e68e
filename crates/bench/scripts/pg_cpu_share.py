#!/usr/bin/env python3
"""CPU seconds of a server_bench run, split into PostgreSQL (its cluster's postmaster and
backends), the tickwheel nodes (children of the bench) and the bench client. Usage:
crates/bench/scripts/pg_cpu_share.py -- target/release/server_bench --targets tw-pg-aa3 --runs 1 ...
(one PostgreSQL target per run: the split is of the whole run)."""
import os, subprocess, sys, time
HZ = os.sysconf('SC_CLK_TCK')
def stat(pid):
    try:
        with open(f'/proc/{pid}/stat') as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(')') + 2:].split()
    # fields after comm: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])
def cmdline(pid):
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            return f.read().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
        return ''
cmd = sys.argv[sys.argv.index('--') + 1:]
p = subprocess.Popen(cmd)
best = {}  # (group, pid) -> ticks
while p.poll() is None:
    pids = [int(d) for d in os.listdir('/proc') if d.isdigit()]
    info = {q: stat(q) for q in pids}
    postmaster = [q for q in pids if f'tickwheel-pg-{p.pid}-' in cmdline(q) and cmdline(q).startswith(('/usr/lib/postgresql', 'postgres'))]
    pm = set(postmaster)
    for q, st in info.items():
        if st is None:
            continue
        ppid, own, children = st
        if q in pm:
            best[('pg', q)] = max(best.get(('pg', q), 0), own + children)
        elif ppid in pm:
            best[('pg', q)] = max(best.get(('pg', q), 0), own)
        elif q == p.pid:
            best[('bench', q)] = max(best.get(('bench', q), 0), own)
        elif ppid == p.pid and 'tickwheel-server' in cmdline(q):
            best[('tw', q)] = max(best.get(('tw', q), 0), own)
    time.sleep(0.3)
tot = {}
for (g, _), t in best.items():
    tot[g] = tot.get(g, 0) + t
s = sum(tot.values()) or 1
print('CPU seconds: ' + ', '.join(f'{g} {t / HZ:.1f} ({100 * t / s:.0f} %)' for g, t in sorted(tot.items())), flush=True)
sys.exit(p.returncode)

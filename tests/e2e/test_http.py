"""The HTTP/JSON API, /metrics and /openapi.json of tickwheel-server (`--http`), as a client
sees them: through real HTTP on 127.0.0.1, beside the beanstalkd protocol (greenstalk).

- jobs put, read, deleted, kicked, buried; tubes paused and resumed; errors are JSON with a
  stable code and a 4xx status, never a 5xx;
- the bearer token (`--http-token`) guards every mutating call; a non-loopback listener
  without a token refuses to start;
- idempotency keys survive a restart, also for a far-future job that stays on disk;
- millisecond delays are never early;
- request rate and body size limits answer 429 / 413 with JSON;
- `/metrics` parses with the `prometheus_client` package's OpenMetrics parser;
- schemathesis fuzzes the API from its own `/openapi.json` (bounded), with no 5xx.
"""

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import greenstalk
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import free_port, tickwheel_process, tickwheel_bin


class Http:
    """A tiny JSON client over urllib (no extra dependency)."""

    def __init__(self, port, token=None):
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def call(self, method, path, body=None, token=None, raw=None, headers=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        tok = token if token is not None else self.token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read().decode()
                return resp.status, resp.headers, text
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def json(self, method, path, body=None, **kw):
        status, headers, text = self.call(method, path, body, **kw)
        return status, (json.loads(text) if text else None)


def start(workdir, *extra, data="data"):
    http_port = free_port()
    server = tickwheel_process(os.path.join(workdir, data), workdir,
                               extra=["--http", f"127.0.0.1:{http_port}", *extra])
    server.start()
    server.http_port = http_port
    wait_ready(http_port)
    return server


def wait_ready(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the HTTP API did not become ready")
        time.sleep(0.02)


def assert_error(status, body, want_status, want_code):
    assert status == want_status, (status, body)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == want_code, body
    assert body["error"]["message"]


@pytest.fixture
def server(workdir):
    s = start(workdir)
    yield s
    s.close()


def test_health_openapi_and_stats(server):
    api = Http(server.http_port)
    assert api.json("GET", "/healthz") == (200, {"status": "ok"})
    assert api.json("GET", "/readyz") == (200, {"status": "ok"})
    status, doc = api.json("GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    for path in ["/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/jobs/{id}/kick",
                 "/api/v1/jobs/{id}/bury", "/api/v1/jobs/by-key/{tube}/{key}",
                 "/api/v1/tubes", "/api/v1/tubes/{tube}", "/api/v1/tubes/{tube}/pause",
                 "/api/v1/tubes/{tube}/resume", "/api/v1/stats", "/metrics", "/healthz"]:
        assert path in doc["paths"], path
    status, stats = api.json("GET", "/api/v1/stats")
    assert status == 200
    assert stats["current_jobs_ready"] == 0 and stats["pid"] == server.proc.pid
    assert set(stats["lateness_ms"]) == {"count", "p50", "p90", "p99", "max"}


def test_jobs_through_http_and_the_protocol(server):
    api = Http(server.http_port)
    status, put = api.json("POST", "/api/v1/jobs", {"tube": "emails", "body": "héllo",
                                                     "priority": 5, "ttr_s": 30})
    assert (status, put["created"]) == (201, True)
    jid = put["id"]
    status, job = api.json("GET", f"/api/v1/jobs/{jid}")
    assert status == 200
    assert (job["tube"], job["state"], job["priority"], job["ttr_s"]) == ("emails", "ready", 5, 30)
    assert job["body_preview"] == "héllo" and job["body_len"] == len("héllo".encode())
    assert base64.b64decode(job["body_base64_preview"]) == "héllo".encode()
    assert job["due_at_ms"] is None and job["idempotency_key"] is None

    # Binary bodies, previews cut at 256 bytes.
    raw = bytes(range(256)) * 2
    status, put2 = api.json("POST", "/api/v1/jobs", {"tube": "emails",
                                                      "body_base64": base64.b64encode(raw).decode()})
    assert status == 201
    _, job2 = api.json("GET", f"/api/v1/jobs/{put2['id']}")
    assert job2["body_len"] == 512 and base64.b64decode(job2["body_base64_preview"]) == raw[:256]

    # A beanstalkd client sees the same jobs.
    with greenstalk.Client(("127.0.0.1", server.port), use="emails", watch="emails") as c:
        got = c.reserve(timeout=2)
        assert got.id == jid and got.body == "héllo"
        assert api.json("GET", f"/api/v1/jobs/{jid}")[1]["state"] == "reserved"
        # A reserved job belongs to its worker.
        assert_error(*api.json("DELETE", f"/api/v1/jobs/{jid}"), 409, "job_reserved")
        assert_error(*api.json("POST", f"/api/v1/jobs/{jid}/bury"), 409, "job_state_conflict")
        c.delete(got)
    assert_error(*api.json("GET", f"/api/v1/jobs/{jid}"), 404, "job_not_found")

    # Operator actions: bury a ready job, kick it back, delete it.
    jid2 = put2["id"]
    status, job = api.json("POST", f"/api/v1/jobs/{jid2}/bury")
    assert (status, job["state"], job["buries"]) == (200, "buried", 1)
    assert_error(*api.json("POST", f"/api/v1/jobs/{jid2}/bury"), 409, "job_state_conflict")
    status, job = api.json("POST", f"/api/v1/jobs/{jid2}/kick")
    assert (status, job["state"], job["kicks"]) == (200, "ready", 1)
    assert_error(*api.json("POST", f"/api/v1/jobs/{jid2}/kick"), 409, "job_state_conflict")
    assert api.call("DELETE", f"/api/v1/jobs/{jid2}")[0] == 204
    assert_error(*api.json("DELETE", f"/api/v1/jobs/{jid2}"), 404, "job_not_found")

    # "Run now": a delayed job kicked is ready at once.
    _, put3 = api.json("POST", "/api/v1/jobs", {"tube": "later", "body": "x", "delay_ms": 3_600_000})
    _, job = api.json("GET", f"/api/v1/jobs/{put3['id']}")
    assert job["state"] == "delayed" and job["time_left_ms"] > 3_500_000
    _, job = api.json("POST", f"/api/v1/jobs/{put3['id']}/kick")
    assert job["state"] == "ready" and job["due_at_ms"] is None

    # Tubes: counts, pause, resume.
    status, tubes = api.json("GET", "/api/v1/tubes")
    later = next(t for t in tubes if t["name"] == "later")
    assert (later["ready"], later["delayed"], later["puts"], later["paused"]) == (1, 0, 1, False)
    status, t = api.json("POST", "/api/v1/tubes/later/pause", {"seconds": 60})
    assert (status, t["paused"]) == (200, True) and 59 <= t["pause_time_left_s"] <= 60
    status, t = api.json("POST", "/api/v1/tubes/later/resume")
    assert (status, t["paused"]) == (200, False)


def test_bad_input_is_a_json_4xx(server):
    api = Http(server.http_port)
    cases = [
        (api.json("GET", "/api/v1/jobs/abc"), 400, "bad_job_id"),
        (api.json("GET", "/api/v1/jobs/99999"), 404, "job_not_found"),
        (api.json("GET", "/api/v1/tubes/-bad"), 400, "bad_tube_name"),
        (api.json("GET", "/api/v1/tubes/nosuchtube"), 404, "tube_not_found"),
        (api.json("GET", "/nowhere"), 404, "not_found"),
        (api.json("PUT", "/api/v1/stats"), 405, "method_not_allowed"),
        (api.json("POST", "/api/v1/jobs", raw=b"{not json"), 400, "bad_json"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "priority": -1}), 422, "bad_json"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "surprise": 1}), 422, "bad_json"),
        (api.json("POST", "/api/v1/jobs", {"tube": "default"}), 400, "missing_body"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "body_base64": "eA=="}), 400,
         "conflicting_fields"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "delay_ms": 1, "due_at_ms": 1}), 400,
         "conflicting_fields"),
        (api.json("POST", "/api/v1/jobs", {"body_base64": "***"}), 400, "bad_base64"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "idempotency_key": ""}), 400,
         "bad_idempotency_key"),
        (api.json("POST", "/api/v1/jobs", {"body": "x", "idempotency_key": "k" * 201}), 400,
         "bad_idempotency_key"),
        (api.json("POST", "/api/v1/jobs", {"body": "x" * 70_000}), 413, "job_too_big"),
        (api.json("POST", "/api/v1/jobs", raw=b'{"body":"' + b"x" * 200_000 + b'"}'), 413,
         "body_too_large"),
        (api.json("POST", "/api/v1/tubes/default/pause", {"seconds": "soon"}), 422, "bad_json"),
    ]
    for (status, body), want_status, want_code in cases:
        assert_error(status, body, want_status, want_code)


def test_the_token_guards_mutating_calls(workdir):
    token_file = os.path.join(workdir, "token")
    with open(token_file, "w") as f:
        f.write("s3cret-token\n")
    s = start(workdir, "--http-token", token_file)
    try:
        api = Http(s.http_port)
        assert_error(*api.json("POST", "/api/v1/jobs", {"body": "x"}), 401, "unauthorized")
        assert_error(*api.json("POST", "/api/v1/jobs", {"body": "x"}, token="wrong"), 401,
                     "unauthorized")
        status, put = api.json("POST", "/api/v1/jobs", {"body": "x"}, token="s3cret-token")
        assert status == 201
        assert api.json("GET", f"/api/v1/jobs/{put['id']}")[0] == 200  # reads need no token
        assert_error(*api.json("DELETE", f"/api/v1/jobs/{put['id']}"), 401, "unauthorized")
        assert_error(*api.json("POST", "/api/v1/tubes/default/pause", {"seconds": 1}), 401,
                     "unauthorized")
        assert api.call("DELETE", f"/api/v1/jobs/{put['id']}", token="s3cret-token")[0] == 204
    finally:
        s.close()


def test_a_non_loopback_listener_needs_a_token(workdir):
    proc = subprocess.run(
        [tickwheel_bin(), "-l", "127.0.0.1", "-p", str(free_port()), "-b",
         os.path.join(workdir, "d"), "--http", f"0.0.0.0:{free_port()}"],
        capture_output=True, timeout=30)
    assert proc.returncode != 0
    assert b"without a token" in proc.stderr, proc.stderr


def test_idempotency_keys_survive_a_restart(workdir):
    # A 1 s memory window: the far job (due in an hour) lives on disk only.
    s = start(workdir, "--window-secs", "1")
    try:
        api = Http(s.http_port)
        near = {"tube": "reports", "body": "near", "delay_ms": 600_000 // 10, "idempotency_key": "near-1"}
        far = {"tube": "reports", "body": "far", "delay_ms": 3_600_000, "idempotency_key": "daily/2026-11-26"}
        ready = {"tube": "reports", "body": "now", "idempotency_key": "now-1"}
        ids = {}
        for name, job in [("near", near), ("far", far), ("ready", ready)]:
            status, put = api.json("POST", "/api/v1/jobs", job)
            assert (status, put["created"]) == (201, True)
            ids[name] = put["id"]
            status, again = api.json("POST", "/api/v1/jobs", dict(job, body="changed"))
            assert (status, again) == (200, {"id": ids[name], "created": False})
        # The same key in another tube is another job.
        status, other = api.json("POST", "/api/v1/jobs", dict(far, tube="other"))
        assert status == 201 and other["id"] not in ids.values()

        s.restart()
        wait_ready(s.http_port)
        for name, job in [("near", near), ("far", far), ("ready", ready)]:
            status, again = api.json("POST", "/api/v1/jobs", dict(job, body="after restart"))
            assert (status, again) == (200, {"id": ids[name], "created": False}), name
            key = urllib.request.quote(job["idempotency_key"], safe="")
            status, got = api.json("GET", f"/api/v1/jobs/by-key/reports/{key}")
            assert status == 200 and got["id"] == ids[name] and got["body_preview"] == job["body"]
            assert got["idempotency_key"] == job["idempotency_key"]
        # The beanstalkd side sees ordinary jobs (time-left in seconds).
        with greenstalk.Client(("127.0.0.1", s.port)) as c:
            st = c.stats_job(ids["far"])
            assert st["state"] == "delayed" and 3500 <= int(st["time-left"]) <= 3600
        # Delete by key frees the key.
        key = urllib.request.quote(far["idempotency_key"], safe="")
        assert api.call("DELETE", f"/api/v1/jobs/by-key/reports/{key}")[0] == 204
        assert_error(*api.json("GET", f"/api/v1/jobs/by-key/reports/{key}"), 404, "job_not_found")
        status, fresh = api.json("POST", "/api/v1/jobs", far)
        assert status == 201 and fresh["id"] > max(ids.values())
    finally:
        s.close()


def test_millisecond_delays_are_never_early(server):
    api = Http(server.http_port)
    delays = [50, 120, 250, 333, 480, 700, 901, 1_250]
    due = {}
    for d in delays:
        status, put = api.json("POST", "/api/v1/jobs", {"tube": "ms", "body": str(d), "delay_ms": d})
        assert status == 201
        _, job = api.json("GET", f"/api/v1/jobs/{put['id']}")
        if job["state"] == "delayed":
            due[put["id"]] = job["due_at_ms"]
    # An absolute due time, 400 ms ahead.
    at = int(time.time() * 1000) + 400
    _, put = api.json("POST", "/api/v1/jobs", {"tube": "ms", "body": "at", "due_at_ms": at})
    _, job = api.json("GET", f"/api/v1/jobs/{put['id']}")
    assert job["due_at_ms"] == at
    due[put["id"]] = at
    assert len(due) >= len(delays) - 1, "almost every job is still delayed right after its put"
    with greenstalk.Client(("127.0.0.1", server.port), watch="ms") as c:
        seen = 0
        while seen < len(delays) + 1:
            job = c.reserve(timeout=5)
            # The wall clock here is the server's: never before the due time.
            got_at = time.time() * 1000
            if job.id in due:
                assert got_at >= due[job.id], (job.body, got_at, due[job.id])
            c.delete(job)
            seen += 1
    status, stats = api.json("GET", "/api/v1/stats")
    assert stats["lateness_ms"]["count"] >= len(due)


def test_metrics_parse_as_openmetrics(server):
    api = Http(server.http_port)
    for i in range(3):
        api.json("POST", "/api/v1/jobs", {"tube": "metered", "body": str(i)})
    api.json("POST", "/api/v1/jobs", {"tube": "metered", "body": "d", "delay_ms": 60_000})
    api.json("POST", "/api/v1/jobs", {"tube": "metered", "body": "soon", "delay_ms": 20})
    time.sleep(0.3)
    with greenstalk.Client(("127.0.0.1", server.port), watch="metered") as c:
        c.delete(c.reserve(timeout=2))
        status, headers, text = api.call("GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    jobs = {(s.labels["tube"], s.labels["state"]): s.value
            for s in families["tickwheel_jobs"].samples}
    assert jobs[("metered", "ready")] == 3
    assert jobs[("metered", "delayed")] == 1
    def value(family, name, **labels):
        return next(s.value for s in families[family].samples
                    if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
    assert value("tickwheel_tube_puts", "tickwheel_tube_puts_total", tube="metered") == 5
    assert value("tickwheel_tube_reserves", "tickwheel_tube_reserves_total", tube="metered") == 1
    assert value("tickwheel_tube_deletes", "tickwheel_tube_deletes_total", tube="metered") == 1
    assert value("tickwheel_lateness_seconds", "tickwheel_lateness_seconds_count") >= 1
    assert value("tickwheel_commit_batch_changes", "tickwheel_commit_batch_changes_count") >= 1
    assert value("tickwheel_commit_duration_seconds", "tickwheel_commit_duration_seconds_count") >= 1
    assert families["tickwheel_connections"].samples[0].value >= 0
    assert "tickwheel_recovery_duration_seconds" in families
    assert "tickwheel_window_loads" in families


def test_rate_limit_answers_429(workdir):
    s = start(workdir, "--http-rate", "5")
    try:
        api = Http(s.http_port)
        statuses = [api.call("GET", "/api/v1/tubes")[0] for _ in range(40)]
        assert 429 in statuses and 200 in statuses, statuses
        status, body = api.json("GET", "/api/v1/tubes")
        if status == 429:
            assert_error(status, body, 429, "rate_limited")
    finally:
        s.close()


def test_schemathesis_finds_no_server_error(server, workdir):
    """Fuzzes every operation from /openapi.json (bounded) and fails on any 5xx."""
    st = shutil.which("schemathesis") or os.path.join(os.path.dirname(os.sys.executable), "schemathesis")
    if not os.path.exists(st):
        pytest.fail("schemathesis is not installed (ci/e2e.sh installs it into the venv)")
    url = f"http://127.0.0.1:{server.http_port}/openapi.json"
    proc = subprocess.run(
        [st, "run", url, "--checks", "not_a_server_error", "--max-examples", "25",
         "--workers", "1", "--seed", "1"],
        capture_output=True, text=True, timeout=300,
        cwd=workdir)  # its caches (.schemathesis/, .hypothesis/) stay out of the source tree
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

"""The web dashboard in a real browser: Debian's chromium (/usr/bin/chromium, headless) driven
by Playwright. The server runs with `--http` and a bearer token; jobs are put over the
beanstalkd protocol (greenstalk) and the HTTP API; the page must show the counts and the due
timeline change, refuse an action without the token, and run a delayed job now with it.

A screenshot is saved in the test's directory; with TICKWHEEL_SCREENSHOT=PATH it is also
written to PATH (docs/dashboard.png is made that way).
"""

import json
import os
import shutil
import time
import urllib.error
import urllib.request

import greenstalk
import pytest

from conftest import free_port, tickwheel_process
from playwright.sync_api import expect, sync_playwright


CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "dash-e2e-token"
TUBE = "dash-e2e"
SOON = "dash-soon"


def http(port, method, path, body=None, token=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_ready(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as res:
                if res.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"/readyz on {port} never answered 200")


@pytest.fixture
def dash_server(workdir):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} not found: apt-get install chromium (ci/e2e.sh does)")
    token_file = os.path.join(workdir, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    hport = free_port()
    server = tickwheel_process(
        os.path.join(workdir, "data"),
        workdir,
        extra=("--http", f"127.0.0.1:{hport}", "--http-token", token_file),
    )
    server.start()
    server.http_port = hport
    wait_ready(hport)
    yield server
    server.close()


@pytest.fixture
def page():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1500})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert errors == [], f"JavaScript errors in the page: {errors}"
        finally:
            browser.close()


def cell(page, tube, column):
    return page.locator(f'#tubes tr[data-tube="{tube}"] td.{column}')


def chart_total(page, resolution):
    return page.locator(f'#timeline-{resolution} svg').get_attribute("data-total")


def test_dashboard_shows_jobs_and_runs_a_delayed_job_now(dash_server, page, workdir):
    port = dash_server.http_port
    page.goto(f"http://127.0.0.1:{port}/")
    expect(page).to_have_title("tickwheel dashboard")
    expect(page.locator('#tubes tr[data-tube="default"]')).to_have_count(1)

    # Jobs over the beanstalkd protocol: in one tube 5 due in ~58 s; in the other 3 ready and
    # 2 due in 2 h.
    with greenstalk.Client(("127.0.0.1", dash_server.port), use=SOON) as c:
        for i in range(5):
            c.put(f"soon {i}", delay=58)
    with greenstalk.Client(("127.0.0.1", dash_server.port), use=TUBE) as c:
        for i in range(3):
            c.put(f"ready {i}")
        later = [c.put(f"later {i}", delay=2 * 3600) for i in range(2)]
    # And one over the API, due in 20 minutes (beyond the server's 10-minute memory window:
    # a far job, counted in the timeline all the same), with an idempotency key.
    status, created = http(port, "POST", "/api/v1/jobs", {
        "tube": TUBE, "body": "invoice 42", "delay_ms": 20 * 60 * 1000,
        "idempotency_key": "order-42",
    }, token=TOKEN)
    assert status == 201, created
    keyed = created["id"]

    # Counts and the timeline change in the page (it polls every 2 s): all tubes first.
    expect(cell(page, TUBE, "ready")).to_have_text("3", timeout=15_000)
    expect(cell(page, TUBE, "delayed")).to_have_text("3")
    expect(cell(page, SOON, "delayed")).to_have_text("5")
    expect(page.locator("#timeline-section")).to_have_attribute("data-delayed", "8", timeout=15_000)
    expect(page.locator("#timeline-second svg")).to_have_attribute("data-total", "5")
    expect(page.locator("#timeline-minute svg")).to_have_attribute("data-total", "6")
    expect(page.locator("#timeline-hour svg")).to_have_attribute("data-total", "8")
    # One tube.
    page.select_option("#timeline-tube", TUBE)
    expect(page.locator("#timeline-section")).to_have_attribute("data-delayed", "3", timeout=15_000)
    expect(page.locator("#timeline-second svg")).to_have_attribute("data-total", "0")
    expect(page.locator("#timeline-minute svg")).to_have_attribute("data-total", "1")
    expect(page.locator("#timeline-hour svg")).to_have_attribute("data-total", "3")
    # The page draws what the API says.
    status, timeline = http(port, "GET", f"/api/v1/timeline?tube={TUBE}")
    assert status == 200, timeline
    by = {s["resolution"]: s for s in timeline["series"]}
    assert sum(b["count"] for b in by["minute"]["buckets"]) == 1
    assert sum(b["count"] for b in by["hour"]["buckets"]) == 3

    # The inspector finds the keyed job by tube + key.
    page.fill("#key-tube", TUBE)
    page.fill("#key", "order-42")
    page.click("#find-by-key button")
    expect(page.locator('#job-fields tr[data-field="id"] td').nth(1)).to_have_text(str(keyed))
    expect(page.locator("#job-body")).to_have_text("invoice 42")

    # A delayed job: "Run now" without the token is refused, and nothing changes.
    page.fill("#job-id", str(later[0]))
    page.click("#find-by-id button")
    expect(page.locator('#job-fields tr[data-field="state"] td').nth(1)).to_have_text("delayed")
    expect(page.locator("#job-kick")).to_have_text("Run now")
    page.click("#job-kick")
    expect(page.locator("#status")).to_have_class("error")
    expect(page.locator("#status")).to_contain_text("token")
    with greenstalk.Client(("127.0.0.1", dash_server.port), use=TUBE) as c:
        assert c.stats_job(later[0])["state"] == "delayed"

    # With the token (kept in sessionStorage), it runs now: ready at once, everywhere.
    page.fill("#token", TOKEN)
    page.dispatch_event("#token", "change")
    page.click("#job-kick")
    expect(page.locator('#job-fields tr[data-field="state"] td').nth(1)).to_have_text("ready")
    expect(page.locator("#status")).to_have_class("ok")
    expect(cell(page, TUBE, "ready")).to_have_text("4", timeout=15_000)
    expect(cell(page, TUBE, "delayed")).to_have_text("2")
    expect(page.locator("#timeline-hour svg")).to_have_attribute("data-total", "2", timeout=15_000)
    expect(page.locator("#timeline-minute svg")).to_have_attribute("data-total", "1")
    with greenstalk.Client(("127.0.0.1", dash_server.port), use=TUBE) as c:
        assert c.stats_job(later[0])["state"] == "ready"
    assert page.evaluate("sessionStorage.getItem('tickwheel.token')") == TOKEN

    # Pause the tube (the page asks how long), then resume it.
    page.once("dialog", lambda d: d.accept("120"))
    page.click(f'#tubes tr[data-tube="{TUBE}"] button[data-action="pause"]')
    expect(page.locator(f'#tubes tr[data-tube="{TUBE}"]')).to_have_class("paused", timeout=15_000)
    status, tube = http(port, "GET", f"/api/v1/tubes/{TUBE}")
    assert status == 200 and tube["paused"], tube
    page.click(f'#tubes tr[data-tube="{TUBE}"] button[data-action="resume"]')
    expect(page.locator(f'#tubes tr[data-tube="{TUBE}"]')).not_to_have_class("paused", timeout=15_000)

    # Lateness chart drawn from /api/v1/stats.
    expect(page.locator("#lateness svg path.p99")).to_have_count(1)

    shot = os.path.join(workdir, "dashboard.png")
    page.screenshot(path=shot, full_page=True)
    assert os.path.getsize(shot) > 10_000
    target = os.environ.get("TICKWHEEL_SCREENSHOT")
    if target:
        shutil.copyfile(shot, target)


def test_timeline_api_counts_far_jobs_across_a_restart_and_rejects_bad_queries(dash_server):
    """The timeline's far part (jobs beyond the 10-minute memory window live only on disk)
    comes back after a restart from the store's due index; bad queries get stable codes."""
    port = dash_server.http_port
    with greenstalk.Client(("127.0.0.1", dash_server.port), use="far") as c:
        c.put("in 30 min", delay=30 * 60)
        c.put("in 3 h", delay=3 * 3600)
        c.put("in 5 min", delay=5 * 60)
        c.put("in 30 days", delay=30 * 86400)

    def totals():
        status, t = http(port, "GET", "/api/v1/timeline?tube=far&hours=24")
        assert status == 200, t
        by = {s["resolution"]: s for s in t["series"]}
        assert [len(by[r]["buckets"]) for r in ("second", "minute", "hour")] == [60, 60, 24]
        for s in t["series"]:
            starts = [b["start_ms"] for b in s["buckets"]]
            assert starts[0] <= t["now_ms"] < starts[0] + s["width_ms"]
            assert all(b - a == s["width_ms"] for a, b in zip(starts, starts[1:]))
        return (t["delayed"], t["later"],
                *(sum(b["count"] for b in by[r]["buckets"]) for r in ("second", "minute", "hour")))

    # delayed, later (past 24 h), next minute, next hour, next 24 h
    assert totals() == (4, 1, 0, 2, 3)
    dash_server.restart()
    wait_ready(port)
    assert totals() == (4, 1, 0, 2, 3)

    for query, status_code, code in [
        ("?hours=0", 400, "bad_hours"),
        ("?hours=169", 400, "bad_hours"),
        ("?hours=x", 400, "bad_query"),
        ("?colour=red", 400, "bad_query"),
        ("?tube=no-such-tube", 404, "tube_not_found"),
        ("?tube=%20bad", 400, "bad_tube_name"),
    ]:
        status, body = http(port, "GET", "/api/v1/timeline" + query)
        assert (status, body["error"]["code"]) == (status_code, code), (query, body)

    # The dashboard's assets are served by the binary itself.
    for path, kind in [("/", "text/html"), ("/assets/dashboard.js", "text/javascript"),
                       ("/assets/dashboard.css", "text/css")]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as res:
            assert res.status == 200 and res.headers["Content-Type"].startswith(kind)

"""The dashboard in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`)
through Selenium, against the real binary serving the shipped reference app."""
import json
import os
import select
import subprocess
import time

import pytest
import requests
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from browser import chrome
from conftest import APP_ID, BIN, MASTER_KEY, Server
from test_app_support import CRON_DIR, shipped_functions

# A Cloud Code file of the test's own: a function that prints, logs and then fails at a known line.
BROKEN = """cloud.define("brokenThing", function(req)
  print("about to break", req.params.n)
  log.warn("still going")
  local t = nil
  return t.field
end)
"""
BROKEN_LINE = 5


def cron_files():
    return {n: open(os.path.join(CRON_DIR, n)).read() for n in os.listdir(CRON_DIR) if n.endswith(".cron")}


def start_app_server():
    fns = shipped_functions()
    fns["dash_errors.lua"] = BROKEN
    s = Server(functions=fns, cron=cron_files()).start()
    r = s.req("POST", "/parse/jobs/seedDemo", {}, master=True)
    assert r.status_code == 200, r.text
    wait_job(s, r.headers["X-Parse-Job-Status-Id"])
    return s


def wait_job(s, run_id, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = s.req("GET", f"/parse/classes/_JobStatus/{run_id}", master=True).json()
        if row.get("status") not in (None, "running"):
            return row
        time.sleep(0.2)
    raise AssertionError(f"job {run_id} did not finish")


@pytest.fixture(scope="module")
def app_server():
    s = start_app_server()
    yield s
    s.stop()
    s.cleanup()


@pytest.fixture(scope="module")
def browser():
    d = chrome()
    yield d
    d.quit()


def wait(cond, timeout=30, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # the element may be replaced while the screen re-renders
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def login(d, s, key=MASTER_KEY):
    d.get(s.url + "/dashboard#data")
    d.execute_script("sessionStorage.clear()")
    d.refresh()
    field = wait(lambda: d.find_element(By.ID, "login-key"), what="login form")
    field.clear()
    field.send_keys(key)
    field.send_keys(Keys.ENTER)
    if key == MASTER_KEY:
        wait(lambda: d.find_element(By.ID, "nav").is_displayed(), what="navigation after login")


def visible_text(d):
    return d.find_element(By.TAG_NAME, "body").text


def go(d, s, screen):
    d.get(s.url + "/dashboard#" + screen)
    wait(lambda: d.find_element(By.CSS_SELECTOR, "#screen h1").is_displayed(), what=f"{screen} screen")


def rest_count(s, cls, where=None):
    params = {"limit": "0", "count": "1"}
    if where is not None:
        params["where"] = json.dumps(where)
    return s.req("GET", f"/parse/classes/{cls}", master=True, params=params).json()["count"]


# ---------------------------------------------------------------- security


def test_pages_are_locked_down_and_never_cross_origin(app_server):
    for path in ("/dashboard", "/dashboard/", "/dashboard/app.js", "/dashboard/app.css"):
        r = requests.get(app_server.url + path, headers={"Origin": "http://evil.example"}, timeout=30)
        assert r.status_code == 200, path
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        assert not any(h.lower().startswith("access-control-") for h in r.headers), r.headers
        assert "Set-Cookie" not in r.headers
    html = requests.get(app_server.url + "/dashboard", timeout=30).text
    assert "<script>" not in html and "style=" not in html and "http" not in html.replace("http-equiv", "")
    r = requests.get(app_server.url + "/dashboard/nope.js", timeout=30)
    assert r.status_code == 404 and r.json()["code"] == 101


def test_wrong_or_missing_master_key_shows_a_message_and_reaches_no_data(app_server, browser):
    d, s = browser, app_server
    d.get(s.url + "/dashboard#data")
    d.execute_script("sessionStorage.clear()")
    d.refresh()
    wait(lambda: d.find_element(By.ID, "login-key").is_displayed(), what="login form")
    d.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait(lambda: "Enter the master key" in d.find_element(By.ID, "login-error").text, what="missing-key message")
    login(d, s, key="not-the-master-key")
    wait(lambda: "Wrong master key" in d.find_element(By.ID, "login-error").text, what="wrong-key message")
    assert not d.find_element(By.ID, "nav").is_displayed()
    assert not d.find_element(By.ID, "screen").is_displayed()
    assert d.execute_script("return sessionStorage.getItem('mb.key')") is None
    body = visible_text(d)
    assert "Post" not in body and "Comment" not in body
    # The only request that carried the key was the check; nothing read data.
    urls = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert not any("/parse/classes" in u or "/admin/classes" in u for u in urls), urls
    # A key dropped from the tab's storage mid-session (or refused later) sends the user back.
    login(d, s)
    d.execute_script("sessionStorage.setItem('mb.key', 'stale-key')")
    d.get(s.url + "/dashboard#schema")
    d.refresh()
    wait(lambda: d.find_element(By.ID, "login").is_displayed(), what="login screen for a refused key")
    assert "refused" in d.find_element(By.ID, "login-error").text


# ---------------------------------------------------------------- data browser


def test_browse_the_seeded_demo_data(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    go(d, s, "data/Post")
    posts = rest_count(s, "Post")
    assert posts > 0
    link = wait(lambda: d.find_element(By.CSS_SELECTOR, '.classes a[href="#data/Post"]'), what="Post in the class list")
    assert link.find_element(By.CSS_SELECTOR, ".count").text == str(posts)
    status = wait(lambda: (t := d.find_element(By.CSS_SELECTOR, "#screen .status").text) and "matching" in t and t,
                  what="row count")
    assert status.startswith(f"{posts} matching")
    rows = d.find_elements(By.CSS_SELECTOR, "#screen tbody tr")
    assert len(rows) == min(25, posts)
    headers = [th.text for th in d.find_elements(By.CSS_SELECTOR, "#screen thead th")]
    loc = headers.index("location")
    first = rows[0].find_elements(By.TAG_NAME, "td")
    lat, lng = (float(x) for x in first[loc].text.split(","))   # a GeoPoint shown as coordinates
    assert -90 <= lat <= 90 and -180 <= lng <= 180
    author = first[headers.index("author")].find_element(By.TAG_NAME, "a")  # a pointer shown as a link
    assert author.get_attribute("href").split("#")[1].startswith("data/_User/")
    assert first[headers.index("createdAt")].text.endswith("Z")

    # where-filter: the same count as REST.
    cat = s.req("GET", "/parse/classes/Post", master=True, params={"limit": "1"}).json()["results"][0]["category"]
    where = d.find_element(By.ID, "where")
    where.clear()
    where.send_keys(json.dumps({"category": cat}))
    where.send_keys(Keys.ENTER)
    want = rest_count(s, "Post", {"category": cat})
    wait(lambda: d.find_element(By.CSS_SELECTOR, "#screen .status").text.startswith(f"{want} matching"), what="filtered count")
    # An invalid where is reported, not sent.
    where.clear()
    where.send_keys("{nope")
    where.send_keys(Keys.ENTER)
    wait(lambda: "not valid JSON" in d.find_element(By.CSS_SELECTOR, "#screen .status").text, what="where error")

    # Sort and paging.
    where.clear()
    d.find_element(By.CSS_SELECTOR, "#order option[value='createdAt']").click()
    d.find_element(By.CSS_SELECTOR, "#limit option[value='10']").click()
    where.send_keys(Keys.ENTER)
    wait(lambda: len(d.find_elements(By.CSS_SELECTOR, "#screen tbody tr")) == 10, what="a page of 10")
    wait(lambda: "rows 1–10" in visible_text(d), what="page info")
    d.find_element(By.XPATH, "//button[contains(., 'Next')]").click()
    wait(lambda: f"rows 11–{min(20, posts)}" in visible_text(d), what="second page")
    shown = [r.find_element(By.TAG_NAME, "td").text for r in d.find_elements(By.CSS_SELECTOR, "#screen tbody tr")]
    page2 = s.req("GET", "/parse/classes/Post", master=True, params={"order": "createdAt", "limit": "10", "skip": "10"}).json()["results"]
    assert shown == [o["objectId"] for o in page2] and len(shown) == min(10, posts - 10)
    dates = [o["createdAt"] for o in page2]
    assert dates == sorted(dates)

    # Following a pointer opens that object.
    go(d, s, "data/Post")
    link = wait(lambda: d.find_element(By.CSS_SELECTOR, "#screen tbody tr td a[href^='#data/_User/']"), what="pointer link")
    uid = link.get_attribute("href").rsplit("/", 1)[1]
    link.send_keys(Keys.ENTER)  # links work from the keyboard
    wait(lambda: d.find_element(By.CSS_SELECTOR, "#screen .status").text.startswith("1 matching"), what="the pointed user")
    assert uid in visible_text(d)


def test_edit_create_delete_go_through_rest(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    go(d, s, "data/Comment")
    # Placeholder rows (no buttons) stand until the page's objects arrive.
    row = wait(lambda: [r for r in d.find_elements(By.CSS_SELECTOR, "#screen tbody tr")
                        if r.find_elements(By.XPATH, ".//button[text()='Edit']")][0], what="comment rows")
    oid = row.find_element(By.TAG_NAME, "td").text
    row.find_element(By.XPATH, ".//button[text()='Edit']").click()
    ta = wait(lambda: d.find_element(By.ID, "dialog-json"), what="editor")
    obj = json.loads(ta.get_attribute("value"))
    obj["text"] = "edited in the dashboard"
    obj["mood"] = "sunny"
    d.execute_script("arguments[0].value = arguments[1]", ta, json.dumps(obj))
    ta.send_keys(Keys.CONTROL, Keys.ENTER)
    wait(lambda: not d.find_element(By.ID, "dialog").is_displayed(), what="dialog closed")
    got = s.req("GET", f"/parse/classes/Comment/{oid}", master=True).json()
    assert got["text"] == "edited in the dashboard" and got["mood"] == "sunny"

    # The same validation as REST: a type change is refused with REST's message, nothing changes.
    row = wait(lambda: [r for r in d.find_elements(By.CSS_SELECTOR, "#screen tbody tr") if r.find_element(By.TAG_NAME, "td").text == oid][0],
               what="edited row")
    row.find_element(By.XPATH, ".//button[text()='Edit']").click()
    ta = wait(lambda: d.find_element(By.ID, "dialog-json"), what="editor")
    obj = json.loads(ta.get_attribute("value"))
    obj["text"] = 12345
    d.execute_script("arguments[0].value = arguments[1]", ta, json.dumps(obj))
    d.find_element(By.ID, "dialog-ok").click()
    err = wait(lambda: d.find_element(By.ID, "dialog-error").text, what="validation error")
    rest = s.req("PUT", f"/parse/classes/Comment/{oid}", {"text": 12345}, master=True)
    assert rest.status_code == 400 and rest.json()["error"] == err
    ta.send_keys(Keys.ESCAPE)
    wait(lambda: not d.find_element(By.ID, "dialog").is_displayed(), what="Escape closes the dialog")
    assert s.req("GET", f"/parse/classes/Comment/{oid}", master=True).json()["text"] == "edited in the dashboard"

    # Removing a field in the editor deletes it on the server, after a second, confirming press.
    row = wait(lambda: [r for r in d.find_elements(By.CSS_SELECTOR, "#screen tbody tr") if r.find_element(By.TAG_NAME, "td").text == oid][0],
               what="edited row")
    row.find_element(By.XPATH, ".//button[text()='Edit']").click()
    ta = wait(lambda: d.find_element(By.ID, "dialog-json"), what="editor")
    obj = json.loads(ta.get_attribute("value"))
    del obj["mood"]
    d.execute_script("arguments[0].value = arguments[1]", ta, json.dumps(obj))
    d.find_element(By.ID, "dialog-ok").click()
    warning = wait(lambda: d.find_element(By.ID, "dialog-error").text, what="the confirmation request")
    assert "deletes the field mood" in warning and "again to confirm" in warning
    assert s.req("GET", f"/parse/classes/Comment/{oid}", master=True).json()["mood"] == "sunny"
    d.find_element(By.ID, "dialog-ok").click()
    wait(lambda: not d.find_element(By.ID, "dialog").is_displayed(), what="dialog closed")
    assert "mood" not in s.req("GET", f"/parse/classes/Comment/{oid}", master=True).json()

    # Create.
    before = rest_count(s, "Comment")
    d.find_element(By.XPATH, "//button[text()='New object']").click()
    ta = wait(lambda: d.find_element(By.ID, "dialog-json"), what="editor")
    d.execute_script("arguments[0].value = arguments[1]", ta,
                     json.dumps({"text": "made in the dashboard", "post": obj["post"], "author": obj["author"]}))
    d.find_element(By.ID, "dialog-ok").click()
    wait(lambda: rest_count(s, "Comment") == before + 1, what="created over REST")
    made = s.req("GET", "/parse/classes/Comment", master=True, params={"where": json.dumps({"text": "made in the dashboard"})}).json()["results"]
    assert len(made) == 1

    # Delete: confirmed; Escape (cancel) keeps the object.
    d.refresh()
    # The screen shows placeholder rows until the page's objects arrive: wait for the object's own.
    wait(lambda: d.find_element(By.CSS_SELECTOR, f"button[aria-label='Delete {oid}']"), what="the object's row").click()
    wait(lambda: d.find_element(By.ID, "dialog").is_displayed(), what="confirmation")
    assert "Delete" in d.find_element(By.ID, "dialog-title").text
    assert d.switch_to.active_element.get_attribute("id") == "dialog-cancel"  # the safe default has focus
    d.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait(lambda: not d.find_element(By.ID, "dialog").is_displayed(), what="confirmation dismissed")
    assert s.req("GET", f"/parse/classes/Comment/{oid}", master=True).status_code == 200
    d.find_element(By.CSS_SELECTOR, f"button[aria-label='Delete {oid}']").click()
    wait(lambda: d.find_element(By.ID, "dialog").is_displayed(), what="confirmation")
    d.find_element(By.ID, "dialog-ok").click()
    wait(lambda: s.req("GET", f"/parse/classes/Comment/{oid}", master=True).status_code == 404, what="deleted over REST")


def test_schema_screen_shows_fields_indexes_and_permissions(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    go(d, s, "schema")
    section = wait(lambda: d.find_element(By.CSS_SELECTOR, "section[aria-label='Post']"), what="Post schema")
    text = section.text
    assert "location" in text and "GeoPoint" in text and "Pointer<_User>" in text
    schema = s.req("GET", "/parse/schemas/_User", master=True).json()
    users = d.find_element(By.CSS_SELECTOR, "section[aria-label='_User']").text
    for name in schema.get("indexes", {}):
        assert name in users


# ---------------------------------------------------------------- Cloud Code


def test_cloud_code_shows_handlers_calls_logs_and_error_file_line(app_server, browser):
    d, s = browser, app_server
    r = s.call("brokenThing", {"n": 7})
    assert r.status_code == 400 and r.json()["code"] == 141
    rid = r.headers["X-Request-Id"]
    login(d, s)
    go(d, s, "cloud")
    text = wait(lambda: (t := visible_text(d)) and "brokenThing" in t and "Recent calls" in t and t, what="handlers")
    assert "cleanupExpiredPosts" in text and "GET /hello" in text and "dash_errors.lua:1" in text
    err = wait(lambda: d.find_element(By.CSS_SELECTOR, ".call-error").text, what="the failed call")
    assert f"dash_errors.lua:{BROKEN_LINE}:" in err
    # The request's logs: its print, its warning and the error, all with the request id.
    d.find_element(By.CSS_SELECTOR, f"a[href='#cloud/{rid}']").click()
    # Until the request's screen has replaced the previous one, `.logs` is still the unfiltered
    # view (which also shows "still going"): wait for the filtered one, whose every line is the
    # request's (a filter that let other lines through never gets there).
    def request_logs():
        t = d.find_element(By.CSS_SELECTOR, ".logs").text
        return t if "still going" in t and all(f"[{rid}]" in line for line in t.splitlines()) else None
    logs = wait(request_logs, what="the request's logs, and only its")
    assert "about to break\t7" in logs or "about to break 7" in logs
    assert f"dash_errors.lua:{BROKEN_LINE}:" in logs and f"[{rid}]" in logs
    # A file's source is one click away.
    d.find_element(By.XPATH, "//button[text()='dash_errors.lua']").click()
    wait(lambda: "brokenThing" in d.find_element(By.CSS_SELECTOR, "pre.code").text, what="file source")


def test_reload_failure_is_shown_with_file_and_line(app_server, browser):
    d, s = browser, app_server
    path = os.path.join(s.functions, "zz_bad.lua")
    with open(path, "w") as f:
        f.write("cloud.define('x', function() end)\nlocal = 1\n")
    try:
        wait(lambda: s.req("GET", "/admin/functions", master=True).json()["errors"], what="reload error")
        login(d, s)
        go(d, s, "cloud")
        alert = wait(lambda: d.find_element(By.CSS_SELECTOR, ".notice[role=alert]"), what="reload failure")
        assert "zz_bad.lua:2" in alert.text
    finally:
        os.remove(path)
        wait(lambda: not s.req("GET", "/admin/functions", master=True).json()["errors"], what="reload recovers")


# ---------------------------------------------------------------- jobs


def test_run_cleanup_now_and_watch_it_reach_100_percent(server_factory, browser):
    d = browser
    s = server_factory(functions=shipped_functions(), cron=cron_files()).start()
    r = s.req("POST", "/parse/jobs/seedDemo", {}, master=True)
    wait_job(s, r.headers["X-Parse-Job-Status-Id"])
    posts = rest_count(s, "Post")
    assert posts > 0
    login(d, s)
    go(d, s, "jobs")
    text = wait(lambda: (t := visible_text(d)) and "*/5 * * * *" in t and t, what="schedule")
    assert "cleanupExpiredPosts" in text
    d.find_element(By.CSS_SELECTOR, "button[data-job='cleanupExpiredPosts']").click()
    ta = wait(lambda: d.find_element(By.ID, "dialog-json"), what="parameters editor")
    # Negative grace: every post expiring within ~2 years counts as expired, so all demo posts go.
    d.execute_script("arguments[0].value = arguments[1]", ta, json.dumps({"graceMinutes": -1000000}))
    d.find_element(By.ID, "dialog-ok").click()
    seen = set()

    def done():
        rows = d.find_elements(By.CSS_SELECTOR, "tr[data-run]")
        runs = [r for r in rows if "cleanupExpiredPosts" in r.text]
        if not runs:
            return False
        row = runs[0]
        seen.add(row.get_attribute("data-status"))
        return row.get_attribute("data-status") == "succeeded" and row.find_element(By.CSS_SELECTOR, ".pct").text == "100%" and row
    row = wait(done, timeout=120, what="the run to reach 100%")
    assert row.find_element(By.TAG_NAME, "progress").get_attribute("value") == "1"
    assert json.loads(row.find_element(By.CSS_SELECTOR, ".message").text) == {"deleted": posts}
    assert rest_count(s, "Post") == 0
    status = s.req("GET", "/parse/classes/_JobStatus", master=True,
                   params={"where": json.dumps({"jobName": "cleanupExpiredPosts"})}).json()["results"]
    assert status[0]["status"] == "succeeded" and status[0]["progress"] == 1


# ---------------------------------------------------------------- usage, config, realtime


def test_usage_chart_shows_units(app_server, browser):
    d, s = browser, app_server
    for _ in range(3):
        s.req("GET", "/hello")
    login(d, s)
    go(d, s, "usage")
    total = int(wait(lambda: d.find_element(By.ID, "total-units").text, what="total units: " + d.find_element(By.ID, "screen").text[:300]))
    app_units = [r for r in s.req("GET", "/admin/usage", master=True, params={"by": "account"}).json()["rows"] if r["key"] == "app"][0]["units"]
    assert 0 < total <= app_units
    bars = [int(g.get_attribute("data-units")) for g in d.find_elements(By.CSS_SELECTOR, "svg.chart g.day")]
    assert len(bars) >= 28 and sum(bars) > 0   # one bar per day of the month, today's not empty
    text = visible_text(d)
    assert "route:GET /hello" in text and "Top callers" in text and "Refusals (429)" in text
    days = s.req("GET", "/admin/usage", master=True, params={"by": "day"}).json()["rows"]
    assert days and days[-1]["key"].endswith("T00:00:00.000Z") and sum(r["units"] for r in days) > 0
    # One function's series: the chart redraws with that function's units only.
    hello = s.req("GET", "/admin/usage", master=True, params={"by": "day", "function": "route:GET /hello"}).json()["rows"]
    assert sum(r["units"] for r in hello) >= 3
    d.find_element(By.CSS_SELECTOR, "#series option[value='function=route:GET /hello']").click()
    wait(lambda: sum(int(g.get_attribute("data-units")) for g in d.find_elements(By.CSS_SELECTOR, "svg.chart g.day"))
         == sum(r["units"] for r in hello), what="the /hello series")
    bad = s.req("GET", "/admin/usage", master=True, params={"by": "account", "function": "x"})
    assert bad.status_code == 400 and bad.json()["code"] == 102


def test_config_screen_says_what_it_can(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    go(d, s, "config")
    has_config = s.req("GET", "/parse/config", master=True).status_code == 200
    text = wait(lambda: (t := d.find_element(By.ID, "screen").text) and "Config" in t and len(t) > 10 and t, what="config screen")
    if has_config:
        assert "Edit parameters" in text
    else:
        assert "not available" in text
    realtime_tab = d.find_element(By.CSS_SELECTOR, "#nav a[data-screen='realtime']")
    metrics = requests.get(s.url + "/metrics", timeout=30).text.lower()
    assert realtime_tab.is_displayed() == any(w in metrics for w in ("realtime", "livequery"))


# ---------------------------------------------------------------- origins, keyboard, phone width


def test_no_request_leaves_the_origin(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    d.get_log("performance")  # drop earlier entries
    for screen in ("data/Post", "schema", "cloud", "jobs", "usage", "config"):
        go(d, s, screen)
        time.sleep(0.5)
        names = d.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert all(n.startswith(s.url + "/") for n in names), names
    urls = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    assert urls and all(u.startswith(s.url + "/") or u.startswith("data:") for u in urls), urls
    # No script error and no policy violation (expected 4xx answers are logged as "network").
    assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE" and e["source"] != "network"]


def test_keyboard_navigation_and_phone_width(app_server):
    s = app_server
    d = chrome(375, 740)
    try:
        login(d, s)
        go(d, s, "data/Post")
        wait(lambda: "matching" in d.find_element(By.CSS_SELECTOR, "#screen .status").text, what="rows")
        for screen in ("data/Post", "cloud", "jobs", "usage", "schema"):
            go(d, s, screen)
            time.sleep(0.5)
            width = d.execute_script("return document.documentElement.scrollWidth")
            assert width <= 376, f"{screen}: the page scrolls sideways ({width}px)"
        # Keyboard: the skip link comes first, then the screens; focus is visible.
        d.get(s.url + "/dashboard#usage")
        d.refresh()
        wait(lambda: d.find_element(By.ID, "total-units"), what="usage")
        ActionChains(d).send_keys(Keys.TAB).perform()
        assert d.switch_to.active_element.get_attribute("class") == "skip"
        d.switch_to.active_element.send_keys(Keys.TAB)
        first = d.switch_to.active_element
        assert first.get_attribute("data-screen") == "data"
        outline = d.execute_script("return getComputedStyle(arguments[0]).outlineStyle", first)
        assert outline != "none"
        first.send_keys(Keys.ENTER)
        wait(lambda: d.execute_script("return location.hash") == "#data", what="Enter follows the link")
    finally:
        d.quit()


def test_no_layout_shift_when_data_loads(app_server, browser):
    d, s = browser, app_server
    login(d, s)
    d.get(s.url + "/dashboard#data/Comment")
    d.refresh()
    wait(lambda: "matching" in d.find_element(By.CSS_SELECTOR, "#screen .status").text, what="rows")
    time.sleep(0.5)
    # Shifts while the screen and its first page loaded (buffered since navigation start).
    d.execute_script("""
        window.__first = [];
        new PerformanceObserver(l => { for (const e of l.getEntries()) if (!e.hadRecentInput) window.__first.push(e.value); })
            .observe({type: 'layout-shift', buffered: true});""")
    time.sleep(0.5)
    first = d.execute_script("return window.__first")
    assert sum(first) < 0.1, first
    # Paging: the table keeps its place while the next page loads.
    d.execute_script("""
        window.__cls = 0;
        new PerformanceObserver(l => { for (const e of l.getEntries()) if (!e.hadRecentInput) window.__cls += e.value; })
            .observe({type: 'layout-shift'});""")
    d.find_element(By.CSS_SELECTOR, "#limit option[value='10']").click()
    d.find_element(By.ID, "where").send_keys(Keys.ENTER)
    wait(lambda: "rows 1–10" in visible_text(d), what="a page of 10")
    d.find_element(By.XPATH, "//button[contains(., 'Next')]").click()
    wait(lambda: "rows 11–20" in visible_text(d), what="the second page")
    time.sleep(0.5)
    assert d.execute_script("return window.__cls") < 0.1


# ---------------------------------------------------------------- logs over HTTP and the CLI


def test_admin_logs_and_moonbase_logs_cli(app_server):
    s = app_server
    r = s.call("brokenThing", {"n": 42})
    rid = r.headers["X-Request-Id"]
    assert requests.get(s.url + "/admin/logs", headers={"X-Parse-Application-Id": APP_ID}, timeout=30).json()["code"] == 119
    bad = s.req("GET", "/admin/logs", master=True, params={"level": "loud"})
    assert bad.status_code == 400 and bad.json()["code"] == 102
    lines = s.req("GET", "/admin/logs", master=True, params={"requestId": rid}).json()["lines"]
    assert [l["msg"] for l in lines][:2] == ["about to break\t42", "still going"]
    assert lines[0]["function"] == "brokenThing" and lines[0]["at"].endswith("dash_errors.lua:2") and lines[0]["source"] == "lua"
    assert lines[-1]["level"] == "error" and f"dash_errors.lua:{BROKEN_LINE}:" in lines[-1]["msg"]
    warn = s.req("GET", "/admin/logs", master=True, params={"requestId": rid, "level": "warn"}).json()["lines"]
    assert [l["level"] for l in warn] == ["warn", "error"]
    last = s.req("GET", "/admin/logs", master=True).json()["last"]
    assert s.req("GET", "/admin/logs", master=True, params={"since": str(last)}).json()["lines"] == []
    calls = s.req("GET", "/admin/calls", master=True, params={"failed": "1"}).json()["results"]
    assert calls[0]["requestId"] == rid and calls[0]["target"] == "function:brokenThing" and calls[0]["code"] == 141

    env = dict(os.environ, MOONBASE_MASTER_KEY=MASTER_KEY, MOONBASE_APP_ID=APP_ID)
    out = subprocess.run([BIN, "logs", "--server", s.url, "--request-id", rid], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"[{rid}] about to break\t42 function=brokenThing at=dash_errors.lua:2" in out.stdout
    bad = subprocess.run([BIN, "logs", "--server", s.url], env=dict(env, MOONBASE_MASTER_KEY="wrong"), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "403" in bad.stderr

    # -f follows: a call made after it started shows up.
    follower = subprocess.Popen([BIN, "logs", "-f", "--server", s.url, "--level", "warn"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        r2 = s.call("brokenThing", {"n": 99})
        rid2 = r2.headers["X-Request-Id"]
        got = ""
        deadline = time.time() + 30
        fd = follower.stdout.fileno()
        while time.time() < deadline and f"[{rid2}] still going" not in got:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                got += os.read(fd, 65536).decode("utf-8", "replace")
        assert f"[{rid2}] still going" in got
        assert f"[{rid2}] about to break" not in got  # an info line, below --level warn
    finally:
        follower.terminate()
        follower.wait(timeout=30)

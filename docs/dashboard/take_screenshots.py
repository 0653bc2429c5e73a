#!/usr/bin/env python3
"""Takes the dashboard screenshots in this folder: the real debug binary serving the reference
app (seeded with its `seedDemo` job, a few calls, a failing function and a cleanup run), shown
by headless Chromium at 1280x800 and at a phone's 375 px.

    make venv && swift build
    MOONBASE_BIN=$PWD/.build/debug/moonbase .venv/bin/python docs/dashboard/take_screenshots.py
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))

from selenium.webdriver.common.by import By  # noqa: E402

from browser import chrome  # noqa: E402
from test_dashboard import go, login, start_app_server, wait, wait_job  # noqa: E402


def shot(d, name):
    time.sleep(0.4)
    d.save_screenshot(os.path.join(HERE, name + ".png"))
    print("wrote", name + ".png")


def main():
    s = start_app_server()
    try:
        for i in range(4):
            s.req("GET", "/hello")
        s.call("brokenThing", {"n": 1})
        r = s.req("POST", "/parse/jobs/cleanupExpiredPosts", {"graceMinutes": 0}, master=True)
        wait_job(s, r.headers["X-Parse-Job-Status-Id"])
        d = chrome(1280, 800)
        try:
            d.get(s.url + "/dashboard")
            wait(lambda: d.find_element(By.ID, "login-key"))
            shot(d, "login")
            login(d, s)
            go(d, s, "data/Post")
            wait(lambda: "matching" in d.find_element(By.CSS_SELECTOR, "#screen .status").text)
            shot(d, "data")
            d.find_elements(By.XPATH, "//button[text()='Edit']")[0].click()
            wait(lambda: d.find_element(By.ID, "dialog-json"))
            shot(d, "data-edit")
            d.find_element(By.ID, "dialog-cancel").click()
            go(d, s, "schema")
            wait(lambda: d.find_element(By.CSS_SELECTOR, "section[aria-label='Post']"))
            d.execute_script("document.querySelector(\"section[aria-label='Post']\").scrollIntoView()")
            shot(d, "schema")
            go(d, s, "cloud")
            wait(lambda: d.find_element(By.CSS_SELECTOR, ".call-error"))
            rid = d.find_element(By.CSS_SELECTOR, ".call-error").find_element(By.XPATH, "../../..").find_element(By.CSS_SELECTOR, "a").text
            shot(d, "cloud")
            d.get(s.url + "/dashboard#cloud/" + rid)
            wait(lambda: "still going" in d.find_element(By.CSS_SELECTOR, ".logs").text)
            d.execute_script("document.querySelector('.logs').scrollIntoView({block: 'center'})")
            shot(d, "cloud-logs")
            go(d, s, "jobs")
            wait(lambda: d.find_elements(By.CSS_SELECTOR, "tr[data-run]"))
            shot(d, "jobs")
            go(d, s, "usage")
            wait(lambda: d.find_element(By.ID, "total-units"))
            shot(d, "usage")
            go(d, s, "config")
            time.sleep(0.5)
            shot(d, "config")
        finally:
            d.quit()
        d = chrome(375, 800)
        try:
            login(d, s)
            go(d, s, "data/Post")
            wait(lambda: "matching" in d.find_element(By.CSS_SELECTOR, "#screen .status").text)
            shot(d, "phone-data")
            go(d, s, "jobs")
            wait(lambda: d.find_elements(By.CSS_SELECTOR, "tr[data-run]"))
            shot(d, "phone-jobs")
        finally:
            d.quit()
    finally:
        s.stop()
        s.cleanup()


if __name__ == "__main__":
    main()

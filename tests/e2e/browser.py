"""Headless Chromium driven by Debian's chromedriver through Selenium (no downloads: the
browser and driver are the system packages `chromium` and `chromium-driver`)."""
import os

os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser or driver

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

CHROMIUM = os.environ.get("MOONBASE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MOONBASE_CHROMEDRIVER", "/usr/bin/chromedriver")


def chrome(width=1280, height=800):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1",
              "--disable-extensions", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_window_size(width, height)
    d.implicitly_wait(0)
    return d

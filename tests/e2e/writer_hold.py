"""A Cloud Code function that holds the SQLite writer for about 1.5 s, and a thread that calls it:
writes sent meanwhile must wait for the writer (the inline-create and group-commit tests)."""
import threading
import time

import requests

from conftest import APP_ID

# A transaction that spins after its first write (under the 2 s writer hold limit).
HOLD_WRITER_LUA = r'''
cloud.define("holdWriter", {timeoutMs = 5000}, function(req)
  return db.transaction(function()
    db.create("Held", {x = 1})
    local t = time.now()
    while time.now() - t < 1500 do end
    return true
  end)
end)
'''


class WriterHold:
    """Calls `holdWriter` on a thread of its own; `start` returns once the transaction holds the
    writer (0.3 s into its 1.5 s), `join` returns its answer."""

    def __init__(self, server):
        self.server = server
        self.answer = None
        self.thread = threading.Thread(target=self._call)

    def _call(self):
        self.answer = requests.post(self.server.url + "/parse/functions/holdWriter", data="{}",
                                    headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"},
                                    timeout=30)

    def start(self):
        self.thread.start()
        time.sleep(0.3)
        return self

    def join(self):
        """Waits for the transaction's end; it must have succeeded."""
        self.thread.join(timeout=60)
        assert self.answer is not None and self.answer.status_code == 200, self.answer and self.answer.text


def run_together(threads):
    """Starts every thread, then waits for each (up to 60 s)."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

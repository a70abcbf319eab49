"""Shared pieces of the HTTP API tests (test_api_*.py): the API's base URL from env
WARREN_MGMT_URL (the tests skip without it), an authenticated requests session, and
polling for objects that RabbitMQ's management shows only after its next stats event."""
import os
import time
import urllib.parse

import pytest

requests = pytest.importorskip("requests")

MGMT_URL = os.environ.get("WARREN_MGMT_URL", "").rstrip("/")
needs_api = pytest.mark.skipif(not MGMT_URL, reason="WARREN_MGMT_URL not set")
USER = os.environ.get("WARREN_MGMT_USER", "guest")
PASSWORD = os.environ.get("WARREN_MGMT_PASSWORD", "guest")
VHOST = "%2F"


def q(name):
    """A path segment: everything escaped, '/' included."""
    return urllib.parse.quote(name, safe="")


def session(user=USER, password=PASSWORD):
    s = requests.Session()
    s.auth = (user, password)
    s.headers["content-type"] = "application/json"
    return s


class Api:
    def __init__(self, user=USER, password=PASSWORD):
        self.s = session(user, password)

    def url(self, path):
        return MGMT_URL + path

    def get(self, path, **kw):
        return self.s.get(self.url(path), timeout=10, **kw)

    def put(self, path, body=None, **kw):
        return self.s.put(self.url(path), json=body if body is not None else {}, timeout=10, **kw)

    def post(self, path, body=None, **kw):
        return self.s.post(self.url(path), json=body if body is not None else {}, timeout=10, **kw)

    def delete(self, path, **kw):
        return self.s.delete(self.url(path), timeout=10, **kw)

    def json(self, path):
        r = self.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


def poll(fn, timeout=12.0, step=0.25, conn=None):
    """Calls fn until it returns something truthy (RabbitMQ's management shows channels,
    consumers and counters only after its next 5 s stats event)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        if conn is not None:
            conn.process_data_events(time_limit=step)
        else:
            time.sleep(step)

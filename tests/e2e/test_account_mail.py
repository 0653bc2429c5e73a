"""Password reset and email verification end to end: a Lua mail hook posts each mail to a local
test server; the link comes from --public-url (never the Host header); the page's GET shows a
plain form and keeps the token; its POST uses the token once; unknown addresses get the same
answer; no hook means code 1 for everyone; throttling per address; emailVerified is the host's."""
import re
import statistics
import time

import requests

from conftest import APP_ID
from outbound_support import LocalServer

PUBLIC = "https://api.example.test"


def hook_lua(mail_url):
    return f'''
cloud.sendEmail(function(m)
  local r = http.request{{method = "POST", url = "{mail_url}", json = m}}
  if r.status ~= 200 then error("mail API answered " .. r.status) end
end)
'''


def start(server_factory, web, hook=True):
    functions = {"mail.lua": hook_lua(web.url + "/mail")} if hook else {"none.lua": "-- no mail hook\n"}
    return server_factory(functions=functions, env={"MOONBASE_HTTP_ALLOW": "127.0.0.1"},
                          args=["--public-url", PUBLIC]).start()


def sign_up(s, name, email, password="Old-Password-1"):
    r = s.req("POST", "/parse/users", {"username": name, "password": password, "email": email})
    assert r.status_code == 201, r.text
    return r.json()


def local(s, link):
    """The public link, opened on the test server."""
    assert link.startswith(PUBLIC + "/apps/")
    return s.url + link[len(PUBLIC):]


def token_of(link):
    return re.search(r"token=([0-9a-f]{64})$", link).group(1)


def test_password_reset_end_to_end(server_factory):
    with LocalServer() as web:
        s = start(server_factory, web)
        user = sign_up(s, "alice", "alice@example.com")
        verify = web.wait_mail(1)
        assert verify["kind"] == "verifyEmail" and verify["to"] == "alice@example.com"

        # The Host header does not leak into links.
        r = s.req("POST", "/parse/requestPasswordReset", {"email": "alice@example.com"},
                  headers={"Host": "evil.example"})
        assert r.status_code == 200 and r.json() == {}
        mail = web.wait_mail(2)
        assert mail["kind"] == "passwordReset" and mail["to"] == "alice@example.com"
        assert mail["subject"] and mail["link"] in mail["text"]
        link = mail["link"]
        assert link.startswith(f"{PUBLIC}/apps/{APP_ID}/request_password_reset?token=")
        assert "evil" not in link
        url = local(s, link)

        # GET shows a plain form, with the security headers, and does not use the token.
        for _ in range(2):
            page = requests.get(url, timeout=10)
            assert page.status_code == 200
            assert page.headers["Content-Type"].startswith("text/html")
            assert page.headers["Referrer-Policy"] == "no-referrer"
            assert "default-src 'none'" in page.headers["Content-Security-Policy"]
            assert "<script" not in page.text.lower() and "new_password" in page.text

        # POST with the token sets the password; the token works once.
        form = {"token": token_of(link), "new_password": "New-Password-2"}
        post_url = f"{s.url}/apps/{APP_ID}/request_password_reset"
        done = requests.post(post_url, data=form, timeout=30)
        assert done.status_code == 200 and "changed" in done.text
        again = requests.post(post_url, data=form, timeout=30)
        assert again.status_code == 400 and "invalid" in again.text
        assert requests.get(url, timeout=10).status_code == 400

        assert s.req("POST", "/parse/login", {"username": "alice", "password": "New-Password-2"}).status_code == 200
        old = s.req("POST", "/parse/login", {"username": "alice", "password": "Old-Password-1"})
        assert old.status_code == 404 and old.json()["code"] == 101
        # The old session was revoked by the password change.
        me = s.req("GET", "/parse/users/me", session=user["sessionToken"])
        assert me.status_code == 400 and me.json()["code"] == 209


def test_unknown_email_same_answer_same_time(server_factory):
    with LocalServer() as web:
        s = start(server_factory, web)
        sign_up(s, "bob", "bob@example.com")
        web.wait_mail(1)
        known, unknown = [], []
        for i in range(4):
            for email, times in (("bob@example.com", known), (f"nobody{i}@example.com", unknown)):
                t0 = time.perf_counter()
                r = s.req("POST", "/parse/requestPasswordReset", {"email": email})
                times.append(time.perf_counter() - t0)
                assert r.status_code == 200 and r.json() == {}
        web.wait_mail(5)
        time.sleep(0.5)
        assert all(m["to"] == "bob@example.com" for m in web.mails)
        assert len(web.mails) == 5
        # Both are answered before any lookup or mail happens: their times do not differ.
        assert abs(statistics.median(known) - statistics.median(unknown)) < 0.1
        # Only the newest reset link works.
        links = [m["link"] for m in web.mails if m["kind"] == "passwordReset"]
        assert requests.get(local(s, links[0]), timeout=10).status_code == 400
        assert requests.get(local(s, links[-1]), timeout=10).status_code == 200


def test_no_hook_answers_code_1_for_everyone(server_factory):
    with LocalServer() as web:
        s = start(server_factory, web, hook=False)
        sign_up(s, "carol", "carol@example.com")
        for path in ("/parse/requestPasswordReset", "/parse/verificationEmailRequest"):
            for email in ("carol@example.com", "nobody@example.com"):
                r = s.req("POST", path, {"email": email})
                assert r.status_code == 500
                assert r.json() == {"code": 1, "error": "email delivery is not configured"}
        assert s.req("POST", "/parse/requestPasswordReset", {}).json()["code"] == 204


def test_throttled_per_address(server_factory):
    with LocalServer() as web:
        s = start(server_factory, web)
        codes = [s.req("POST", "/parse/requestPasswordReset", {"email": "nobody@example.com"}).status_code
                 for _ in range(6)]
        assert codes[:5] == [200] * 5
        assert codes[5] == 429
        # Another address is not affected.
        assert s.req("POST", "/parse/requestPasswordReset", {"email": "other@example.com"}).status_code == 200


def test_email_verification(server_factory):
    with LocalServer() as web:
        s = start(server_factory, web)
        u = sign_up(s, "dave", "dave@example.com")
        mail = web.wait_mail(1)
        assert mail["kind"] == "verifyEmail"
        assert mail["link"].startswith(f"{PUBLIC}/apps/{APP_ID}/verify_email?token=")
        me = s.req("GET", "/parse/users/me", session=u["sessionToken"]).json()
        assert me["emailVerified"] is False
        # Not client-writable.
        r = s.req("PUT", f"/parse/users/{u['objectId']}", {"emailVerified": True}, session=u["sessionToken"])
        assert r.status_code == 403 and r.json()["code"] == 119
        r = s.req("POST", "/parse/users", {"username": "eve", "password": "x-Password-1", "email": "eve@example.com",
                                           "emailVerified": True})
        assert r.status_code == 403 and r.json()["code"] == 119
        # A new request sends a new link; the GET shows a confirmation form; POST verifies once.
        assert s.req("POST", "/parse/verificationEmailRequest", {"email": "dave@example.com"}).json() == {}
        link = web.wait_mail(2)["link"]
        page = requests.get(local(s, link), timeout=10)
        assert page.status_code == 200 and "<form method=\"post\"" in page.text
        assert s.req("GET", "/parse/users/me", session=u["sessionToken"]).json()["emailVerified"] is False
        url = f"{s.url}/apps/{APP_ID}/verify_email"
        assert requests.post(url, data={"token": token_of(link)}, timeout=10).status_code == 200
        assert requests.post(url, data={"token": token_of(link)}, timeout=10).status_code == 400
        assert s.req("GET", "/parse/users/me", session=u["sessionToken"]).json()["emailVerified"] is True
        # A verified address gets no more verification mails.
        assert s.req("POST", "/parse/verificationEmailRequest", {"email": "dave@example.com"}).json() == {}
        time.sleep(0.5)
        assert len(web.mails) == 2
        # A new address is unverified again and gets its own mail.
        r = s.req("PUT", f"/parse/users/{u['objectId']}", {"email": "dave2@example.com", "currentPassword": "Old-Password-1"},
                  session=u["sessionToken"])
        assert r.status_code == 200, r.text
        assert s.req("GET", "/parse/users/me", session=u["sessionToken"]).json()["emailVerified"] is False
        mail = web.wait_mail(3)
        assert mail["kind"] == "verifyEmail" and mail["to"] == "dave2@example.com"

"""GET / serves the web UI page (docs/webui.md; its browser test is test_node_sdk.py's
test_web_ui_in_chromium): public with --api-key (the page holds no data and asks for the key),
served while the model loads, with a CSP; --no-webui / --no-ui turn it off. Also llama-server's
--alias list and --tags in /models."""

from conftest import Server


def test_page_security_and_switch(tmp_path):
    s = Server(tmp_path / "on", "-np", "1", "--api-key", "k1", "--alias", "tiny, code,fim", "--tags", "chat,small")
    try:
        for path in ("/", "/index.html"):
            status, html = s.get(path)
            assert status == 200 and html.startswith("<!doctype html>") and "/v1/chat/completions" in html, path
        conn = s.connection()
        conn.request("GET", "/")
        resp = conn.getresponse()
        resp.read()
        assert resp.getheader("Content-Type") == "text/html; charset=utf-8"
        csp = resp.getheader("Content-Security-Policy")
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert resp.getheader("X-Content-Type-Options") == "nosniff"
        conn.close()
        # Only the page is public: the API still wants the key.
        assert s.get("/props")[0] == 401
        assert s.request("POST", "/", {"a": 1}, headers={"Authorization": "Bearer k1"})[0] == 404
        status, models = s.get("/v1/models", headers={"Authorization": "Bearer k1"})
        assert status == 200, models
        m = models["data"][0]
        assert m["id"] == "code" and m["aliases"] == ["code", "fim", "tiny"] and m["tags"] == ["chat", "small"]
        status, props = s.get("/props", headers={"Authorization": "Bearer k1"})
        assert props["model_alias"] == "code"
    finally:
        s.stop()

    for flag in ("--no-webui", "--no-ui"):
        s = Server(tmp_path / flag, "-np", "1", flag)
        try:
            assert s.get("/")[0] == 404
        finally:
            s.stop()

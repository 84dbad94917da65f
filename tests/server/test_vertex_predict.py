"""Vertex AI's prediction protocol (issue 21, llama-server's AIP_MODE=PREDICTION): every instance is
a request to the route its @requestFormat names, answered in order in "predictions"; an instance's
error stays in its place."""

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("vertex"), "-np", "2", "-c", "1024",
               env={"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/vertex/health"})
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def test_instances_are_answered_in_order(srv):
    chat = {"max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Say hello"}]}
    status, out = srv.post("/predict", {"instances": [
        dict(chat, **{"@requestFormat": "chatCompletions"}),
        {"@requestFormat": "/completion", "prompt": "a b", "n_predict": 3, "temperature": 0, "stream": True},
        {"@requestFormat": "tokenize", "content": "a b"},
        {"@requestFormat": "nothing", "x": 1},
        {"@requestFormat": "completions", "prompt": "x", "n_predict": "many"},
        "not an object",
    ]})
    assert status == 200, out
    p = out["predictions"]
    assert len(p) == 6
    _, direct = srv.post("/v1/chat/completions", chat)
    assert p[0]["choices"][0]["message"] == direct["choices"][0]["message"]
    _, native = srv.post("/completion", {"prompt": "a b", "n_predict": 3, "temperature": 0})
    assert p[1]["content"] == native["content"]  # streaming is turned off inside predictions
    assert p[2]["tokens"] == srv.post("/tokenize", {"content": "a b"})[1]["tokens"]
    assert "no handler registered for @requestFormat: nothing" in p[3]["error"]["message"]
    assert p[4]["error"]["type"] == "invalid_request_error"
    assert "must be a JSON object" in p[5]["error"]["message"]


def test_bad_bodies_and_the_health_route(srv):
    for body in ({}, {"instances": 3}, {"instances": [{}] * 129}):
        status, out = srv.post("/predict", body)
        assert status == 400, (body, out)
    assert srv.get("/vertex/health") == (200, {"status": "ok"})
    # without AIP_MODE there is no such route
    assert srv.post("/predict/else", {"instances": []})[0] == 404


def test_without_aip_mode_no_predict_route(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "512")
    try:
        assert s.post("/predict", {"instances": []})[0] == 404
    finally:
        s.stop()

"""--sleep-idle-seconds (issue 21, llama-server's flag): after that long without requests the model
is unloaded; observers (/health, /props, /models, /metrics) are answered without waking it, and
the next request that needs the model loads it again and is served as before."""

import time

from conftest import Server, wait_for


def test_sleeps_when_idle_and_wakes_for_work(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "512", "--metrics", "--sleep-idle-seconds", "1")
    try:
        body = {"prompt": "Hello there", "n_predict": 4, "temperature": 0}
        status, before = s.post("/completion", body)
        assert status == 200
        assert s.get("/props")[1]["is_sleeping"] is False
        assert wait_for(lambda: s.get("/props")[1]["is_sleeping"] is True, timeout=10), s.log()
        # observers keep it asleep: polling faster than the idle time does not wake it
        for _ in range(6):
            assert s.get("/health") == (200, {"status": "ok"})
            status, models = s.get("/v1/models")
            assert status == 200 and models["data"][0]["id"]
            assert s.request("GET", "/metrics", raw=True)[0] == 200
            time.sleep(0.25)
        status, props = s.get("/props")
        assert status == 200 and props["is_sleeping"] is True and props["total_slots"] == 1
        assert s.log().count("model loaded in") == 1
        # work wakes it; the answer is what it was
        status, after = s.post("/completion", body)
        assert status == 200, after
        assert after["content"] == before["content"]
        assert s.get("/props")[1]["is_sleeping"] is False
        assert s.log().count("model loaded in") == 2
        assert "sleeping: idle for 1 s" in s.log()
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()


def test_a_long_request_is_not_cut_by_sleep(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "2048", "--sleep-idle-seconds", "0")
    try:
        # --sleep-idle-seconds 0: asleep whenever nothing runs, never while something does
        status, _, events = s.stream("/completion", {"prompt": "a", "n_predict": 200, "temperature": 0,
                                                     "ignore_eos": True, "stream": True})
        assert status == 200 and events[-1]["stop"] and events[-1]["tokens_predicted"] == 200
        assert wait_for(lambda: s.get("/props")[1]["is_sleeping"] is True, timeout=10)
        status, out = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert status == 200, out
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()


def test_requests_arriving_together_load_the_model_once(tmp_path):
    import threading
    s = Server(tmp_path, "-np", "2", "-c", "1024", "--sleep-idle-seconds", "0")
    try:
        assert wait_for(lambda: s.get("/props")[1]["is_sleeping"] is True, timeout=10)
        results = []

        def ask(i):
            results.append(s.post("/completion", {"prompt": "number %d" % i, "n_predict": 3, "temperature": 0}))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [status for status, _ in results] == [200] * 4, results
        assert s.log().count("waking up") == 1 and s.log().count("model loaded in") == 2
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()

"""Continuous batching: more requests than slots, all answered, each as if it had run alone."""

import re
import threading


def _metric(server, name):
    _, text = server.get("/metrics", raw=True)
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))


def test_parallel_requests_match_sequential_ones(server, reference):
    prompts = [case["prompt_tokens"] for case in reference] + [reference[0]["prompt_tokens"][:5],
                                                                reference[5]["prompt_tokens"][:20]]
    assert len(prompts) == 8
    body = {"n_predict": 8, "temperature": 0, "repeat_penalty": 2.0, "return_tokens": True, "cache_prompt": False}

    alone = []
    for p in prompts:
        status, res = server.post("/completion", {"prompt": p, **body})
        assert status == 200
        alone.append(res["tokens"])

    decodes_before = _metric(server, "n_decode_total")
    busy_before = _metric(server, "n_busy_slots_per_decode") * decodes_before
    results = [None] * len(prompts)

    def run(i):
        results[i] = server.post("/completion", {"prompt": prompts[i], **body})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i, r in enumerate(results):
        assert r is not None and r[0] == 200, r
        assert r[1]["tokens"] == alone[i], "request %d differs when batched with others" % i
    assert {r[1]["id_slot"] for r in results} <= {0, 1, 2, 3}

    # Several slots shared decode calls: 8 requests of 8 tokens took fewer decodes than alone.
    decodes = _metric(server, "n_decode_total") - decodes_before
    busy = _metric(server, "n_busy_slots_per_decode") * _metric(server, "n_decode_total") - busy_before
    assert decodes < 8 * 8
    assert busy / decodes > 1.5
    server.wait_all_idle()

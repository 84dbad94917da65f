#!/usr/bin/env python3
"""What llama.cpp's server test suite starts as LLAMA_SERVER_BIN_PATH (run_suite.py sets it).

The suite names its models by Hugging Face repository (`--hf-repo`, `--hf-file`) and would download
them; nothing is downloaded here. This shim replaces them with the local fixture model of the same
kind (MODELS below), then starts the server under test with the suite's other flags unchanged:
`agentkv serve ARGS` (SUITE_SERVER=agentkv) or llama.cpp's `llama-server ARGS` (SUITE_SERVER=llama).
Both get the same model for the same test, so a difference is the server's.

Environment: SUITE_SERVER (agentkv | llama), SUITE_BIN (the binary), SUITE_FIXTURES (the
fixtures folder: models/ inside).
"""
import os
import sys

# A repository (or file) name containing the key -> the fixture model used instead. The first
# match wins; anything else (the suite's tiny llamas, BERT, real chat models) gets the dense
# Qwen3 fixture, the one model kind both servers load.
MODELS = [
    ("moe", "qwen35moe-micro.gguf"),  # stories15M_MOE: the MoE preset
    ("", "qwen3-micro.gguf"),
]


def local_model(repo, file):
    name = ((repo or "") + "/" + (file or "")).lower()
    fixtures = os.environ["SUITE_FIXTURES"]
    for key, model in MODELS:
        if key in name:
            return os.path.join(fixtures, "models", model)
    raise AssertionError("unreachable")


def main(argv):
    args, repo, file, has_model = [], None, None, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--hf-repo", "-hf", "-hfr") and i + 1 < len(argv):
            repo, i = argv[i + 1], i + 2
            continue
        if a in ("--hf-file", "-hff") and i + 1 < len(argv):
            file, i = argv[i + 1], i + 2
            continue
        if a in ("--model", "-m"):
            has_model = True
        args.append(a)
        i += 1
    if (repo or file) and not has_model:
        args = ["--model", local_model(repo, file)] + args
    binary = os.environ["SUITE_BIN"]
    if os.environ.get("SUITE_SERVER", "agentkv") == "agentkv":
        cmd = [binary, "serve"] + args
    else:
        cmd = [binary] + args
    sys.stderr.write("server_shim: %s\n" % " ".join(cmd))
    sys.stderr.flush()
    os.execv(binary, cmd)


if __name__ == "__main__":
    main(sys.argv[1:])

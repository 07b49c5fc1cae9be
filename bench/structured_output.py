#!/usr/bin/env python3
"""Throughput with and without a JSON schema (issue 23): the same chat requests at a fixed
concurrency against one `tqserve serve`, each exactly --max-tokens tokens long in both runs (the
schema asks for an array of at least 1000 short strings, which no request completes within its
budget, and ignore_eos keeps the free run going), so the ratio of output tokens per second is the
cost of computing and applying the token masks. Prints JSON on the last line.

    bench/structured_output.py --url http://127.0.0.1:8000 [--requests 64] [--concurrency 16] [--max-tokens 64]
"""
import argparse
import concurrent.futures
import json
import time

import openai

SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1000}
TOPICS = ["fruits", "cities", "animals", "colors", "rivers", "tools", "games", "flowers"]


def run(client, model, args, schema):
    def one(i):
        extra = {"ignore_eos": True}
        kwargs = {}
        if schema:
            kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": "list", "schema": SCHEMA}}
        out = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"List some {TOPICS[i % len(TOPICS)]} as JSON."}],
            max_tokens=args.max_tokens, temperature=0.8, seed=i, extra_body=extra, **kwargs)
        return out.usage.completion_tokens
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        tokens = sum(pool.map(one, range(args.requests)))
    wall = time.perf_counter() - start
    return {"output_tokens": tokens, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default=None, help="served model name (default: the server's only model)")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="alternating free / schema rounds; the best of each counts")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key="none", timeout=600, max_retries=0)
    model = args.model or client.models.list().data[0].id
    run(client, model, argparse.Namespace(**{**vars(args), "requests": args.concurrency}), False)  # warm-up
    free, constrained = [], []
    for _ in range(args.rounds):
        free.append(run(client, model, args, False))
        constrained.append(run(client, model, args, True))
    best_free = max(free, key=lambda r: r["output_tok_s"])
    best_schema = max(constrained, key=lambda r: r["output_tok_s"])
    for r in free + constrained:
        assert r["output_tokens"] == args.requests * args.max_tokens, r
    print(json.dumps({"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                      "free": free, "schema": constrained,
                      "ratio_schema_vs_free": round(best_schema["output_tok_s"] / best_free["output_tok_s"], 3)}))


if __name__ == "__main__":
    main()

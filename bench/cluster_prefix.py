#!/usr/bin/env python3
"""Prefix-sharing load through a router (issue 22): G conversation groups, each a shared prefix of
about P tokens, every request its group's prefix plus a unique suffix, streamed through the router
at a fixed concurrency with the official openai client. Reports the prefix-cache hit rate over the
replicas (their vllm:prefix_cache_hits_total / queries_total, before and after), TTFT p50/p90 and
failed requests, as JSON on the last line.

    bench/cluster_prefix.py --router http://127.0.0.1:8100 --replicas http://127.0.0.1:8001 http://127.0.0.1:8002
"""
import argparse
import concurrent.futures
import json
import random
import re
import statistics
import time
import urllib.request

import openai


def counters(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for name in ("prefix_cache_queries_total", "prefix_cache_hits_total"):
        m = re.search(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--router", required=True)
    ap.add_argument("--replicas", nargs="+", required=True)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--prefix-words", type=int, default=700, help="words per shared prefix (about 1k tokens)")
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    rng = random.Random(a.seed)
    vocabulary = [w for w in re.findall(r"[a-z]+", open(__file__).read().lower()) if len(w) > 2]
    prefixes = [f"Conversation {g}. " + " ".join(rng.choice(vocabulary) for _ in range(a.prefix_words))
                for g in range(a.groups)]
    jobs = [(rng.randrange(a.groups), i) for i in range(a.requests)]
    client = openai.OpenAI(base_url=a.router + "/v1", api_key="unused", max_retries=0, timeout=600)

    def run(job):
        group, i = job
        prompt = prefixes[group] + f"\nQuestion {i}: " + " ".join(rng.choice(vocabulary) for _ in range(12))
        start = time.monotonic()
        try:
            ttft = None
            for chunk in client.completions.create(model=a.model, prompt=prompt, max_tokens=a.max_tokens,
                                                   temperature=0, stream=True):
                if ttft is None and chunk.choices and chunk.choices[0].text:
                    ttft = time.monotonic() - start
            return ttft if ttft is not None else time.monotonic() - start, None
        except Exception as e:  # counted, reported
            return None, f"{type(e).__name__}: {e}"

    before = [counters(u) for u in a.replicas]
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
        results = list(pool.map(run, jobs))
    wall = time.monotonic() - t0
    after = [counters(u) for u in a.replicas]
    queries = sum(x["prefix_cache_queries_total"] - y["prefix_cache_queries_total"] for x, y in zip(after, before))
    hits = sum(x["prefix_cache_hits_total"] - y["prefix_cache_hits_total"] for x, y in zip(after, before))
    per_replica = [x["prefix_cache_queries_total"] - y["prefix_cache_queries_total"] for x, y in zip(after, before)]
    ttfts = sorted(t for t, err in results if err is None)
    errors = [err for _, err in results if err is not None]
    report = {"requests": a.requests, "failed": len(errors), "first_errors": errors[:3], "wall_s": round(wall, 1),
              "hit_rate": round(hits / queries, 4) if queries else 0.0, "prompt_tokens_per_replica": per_replica,
              "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
              "ttft_p90_s": round(ttfts[int(0.9 * (len(ttfts) - 1))], 3) if ttfts else None}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

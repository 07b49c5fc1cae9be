"""Observing the server process during the soak (scripts/soak.py): /proc readers (VmRSS and
friends, RSS by mapping kind, open files, the server's open TCP connections), glibc malloc_info
through gdb, the RSS sampler and its summary, the wait for an idle server, and the HTTP status
counts from /metrics."""
import asyncio
import os
import statistics
import time


def read_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
                    out[k] = int(v.split()[0])
    except FileNotFoundError:
        pass
    return out


def open_server_connections(port):
    """Server-side TCP connections on `port` the server has not closed yet (ESTABLISHED or
    CLOSE_WAIT in /proc/net/tcp*)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in ("01", "08"):
                        n += 1
        except FileNotFoundError:
            pass
    return n


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        return -1


async def wait_connections_closed(port, timeout=60):
    deadline = time.time() + timeout
    while open_server_connections(port) and time.time() < deadline:
        await asyncio.sleep(0.2)
    return open_server_connections(port)


def rss_by_mapping(pid):
    """Resident KiB by kind of mapping (/proc/PID/smaps): to tell a leak (malloc arenas, the
    brk heap) from thread stacks, file pages and big allocations (KV cache, weights)."""
    out = {"heap": 0, "malloc_arenas": 0, "thread_stacks": 0, "big_anon": 0, "other_anon": 0, "file": 0}
    try:
        with open(f"/proc/{pid}/smaps") as f:
            kind = None
            for line in f:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):
                    fields = line.split()
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    path = fields[5] if len(fields) > 5 else ""
                    size_kib = (hi - lo) // 1024
                    if path == "[heap]":
                        kind = "heap"
                    elif path.startswith("/"):
                        kind = "file"
                    elif path:
                        kind = "other_anon"
                    elif size_kib == 8192 and "rw" in fields[1]:
                        kind = "thread_stacks"
                    elif lo % (64 << 20) == 0 and size_kib <= 65536:
                        kind = "malloc_arenas"  # glibc's per-thread heaps: 64 MiB aligned
                    elif size_kib >= 16384:
                        kind = "big_anon"
                    else:
                        kind = "other_anon"
                elif first == "Rss:" and kind:
                    out[kind] += int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def malloc_info(pid):
    """glibc's malloc_info() of the server, through gdb (--malloc-info): bytes the arenas hold
    from the system, of which free in their bins, and in mmapped chunks. A leak grows the bytes
    in use (held - free); fragmentation grows the free bytes."""
    import re
    import shutil
    import subprocess
    import tempfile
    if not shutil.which("gdb"):
        return {"error": "gdb not found"}
    path = os.path.join(tempfile.gettempdir(), f"soak-malloc-info-{pid}.xml")
    cmd = ["gdb", "-p", str(pid), "-batch", "-n", "-iex", "set auto-solib-add on",
           "-ex", f'set $f = (void*)fopen("{path}", "w")', "-ex", "call (int)malloc_info(0, $f)",
           "-ex", "call (int)fclose($f)"]
    subprocess.run(cmd, capture_output=True, timeout=120)
    try:
        xml = open(path).read()
        os.unlink(path)
    except FileNotFoundError:
        return {"error": "gdb could not call malloc_info"}
    tail = xml[xml.rfind("</heap>"):]
    get = lambda pat: sum(int(x) for x in re.findall(pat, tail))  # noqa: E731
    held = get(r'<system type="current" size="(\d+)"')
    free = get(r'<total type="fast" count="\d+" size="(\d+)"') + get(r'<total type="rest" count="\d+" size="(\d+)"')
    mmap = get(r'<total type="mmap" count="\d+" size="(\d+)"')
    return {"arenas": xml.count("<heap nr="), "held_kib": held // 1024, "free_kib": free // 1024,
            "in_use_kib": (held - free) // 1024, "mmap_kib": mmap // 1024}


async def sample_rss(pid, series, stop, interval):
    t0 = time.time()
    while not stop.is_set():
        s = read_status(pid)
        if s:
            series.append((time.time() - t0, s))
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


def summarize_rss(series):
    vals = [s["VmRSS"] for _, s in series]
    return {
        "samples": len(vals),
        "min_kib": min(vals) if vals else 0,
        "max_kib": max(vals) if vals else 0,
        "mean_kib": int(statistics.mean(vals)) if vals else 0,
        "peak_threads": max((s.get("Threads", 0) for _, s in series), default=0),
    }


def settle(server, worker_idle_exit_s=5.0):
    """Waits until the server is idle, has closed every connection, and its HTTP worker threads
    that had no work for worker_idle_exit_s have exited (tqserve:http_worker_threads unchanged for
    longer than that), then returns the metrics."""
    server.wait_idle(timeout=120)
    deadline = time.time() + 60
    while open_server_connections(server.port) and time.time() < deadline:
        time.sleep(0.2)
    deadline = time.time() + 60
    workers, since = None, time.time()
    while time.time() < deadline:
        now = server.metrics().get("tqserve:http_worker_threads")
        if now != workers:
            workers, since = now, time.time()
        elif time.time() - since > worker_idle_exit_s + 1.5:
            break
        time.sleep(0.5)
    return server.wait_idle(timeout=60)


def http_codes(server):
    status, text = server.get("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("tqserve:http_responses_total{"):
            code = int(line.split('status="')[1].split('"')[0])
            out[code] = out.get(code, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out

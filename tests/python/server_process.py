"""Starts `tqserve serve` on a free loopback port for a test and stops it (SIGTERM, exit 0 checked)."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request


class ServerProcess:
    def __init__(self, binary, *args, startup_timeout=180, wait_healthy=True, env=None):
        self.proc = subprocess.Popen([str(binary), "serve", "--port", "0", *map(str, args)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.log = []
        self.port = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=pump, daemon=True)
        self._reader.start()
        if not ready.wait(startup_timeout) or self.port is None:
            self.proc.kill()
            raise RuntimeError("tqserve serve did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout = startup_timeout
        if wait_healthy:
            self.wait_healthy()

    def wait_healthy(self):
        startup_timeout = self.startup_timeout
        deadline = time.time() + startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tqserve serve exited:\n" + "".join(self.log))
            status, _ = self.get("/health")
            if status == 200:
                return
            time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("tqserve serve never became healthy:\n" + "".join(self.log))

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError):
            return 0, ""

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def metrics(self):
        """The /metrics samples as {name: value} (labels dropped; values of one name summed)."""
        status, text = self.get("/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, value = line.rsplit(" ", 1)
            base = name.split("{", 1)[0]
            labels = name[len(base):]
            # Keep the finish reason: tqserve:request_success_total{finished_reason="abort"}
            if "finished_reason" in labels:
                base += "{" + labels[labels.find("finished_reason"):].split(",")[0].rstrip("}") + "}"
            key = base
            out[key] = out.get(key, 0.0) + float(value)
        return out

    def wait_idle(self, timeout=60):
        """Waits until no request runs or waits and no KV block is held; returns the metrics."""
        deadline = time.time() + timeout
        m = self.metrics()
        while time.time() < deadline:
            m = self.metrics()
            if (m["tqserve:num_requests_running"] == 0 and m["tqserve:num_requests_waiting"] == 0
                    and m["tqserve:kv_cache_blocks_in_use"] == 0):
                return m
            time.sleep(0.1)
        return m

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode

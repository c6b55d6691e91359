"""Real network faults between a mirror and its clusters, for tests and drills: Toxiproxy in front of each cluster.

A dev tool, like `local`: production code never imports it. `make toxiproxy` builds the server from the Go module
proxy into `{home}/bin/toxiproxy-server`. Each proxied link is one Toxiproxy proxy: a port the mirror connects to,
forwarding to a broker listener that advertises that port (`local.up(..., proxied=...)`), so that metadata keeps
clients on the proxied path. A link can be cut (the proxy refuses and drops connections) and restored, and
delayed like a WAN (latency each way) and back.

Invariants:
  A. `Toxiproxy.start` owns the server process it starts; `stop` ends it and every proxy with it;
  B. a cut link drops the connections open through it, not only new ones (Toxiproxy closes them on disable).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorflow.errors import LocalClusterError
from mirrorflow.model import paths

TOXIPROXY_VERSION = "v2.5.0"  # the newest github.com/Shopify/toxiproxy/v2 the Go module proxy serves here


def server_binary() -> Path:
    return Path(os.environ.get("MIRRORFLOW_TOXIPROXY", str(paths.home() / "bin" / "toxiproxy-server")))


@dataclass(frozen=True)
class Link:
    """One proxied path: clients connect to `listen`, Toxiproxy forwards to `upstream` (both host:port)."""
    name: str
    listen: str
    upstream: str


class Toxiproxy:
    """A Toxiproxy server on 127.0.0.1:`port`, driven through its HTTP API."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Toxiproxy:
        binary = server_binary()
        if not binary.exists():
            raise LocalClusterError(f"{binary} is missing: run `make toxiproxy` (it builds Toxiproxy "
                                    f"{TOXIPROXY_VERSION} with `go install`)")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(binary), "-host", "127.0.0.1", "-port", str(self.port)], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise LocalClusterError(f"toxiproxy exited with code {self.proc.returncode}; see {self.log}")
                try:
                    self._call("GET", "/version")
                    return self
                except OSError:
                    time.sleep(0.1)
            raise LocalClusterError(f"toxiproxy did not answer on port {self.port} within {timeout:.0f} s")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def add(self, link: Link) -> Link:
        self._call("POST", "/proxies", {"name": link.name, "listen": link.listen, "upstream": link.upstream,
                                        "enabled": True})
        return link

    def cut(self, name: str) -> None:
        """No connection through the link: open ones are dropped, new ones refused."""
        self._call("POST", f"/proxies/{name}", {"enabled": False})

    def restore(self, name: str) -> None:
        self._call("POST", f"/proxies/{name}", {"enabled": True})

    def delay(self, name: str, one_way_ms: int) -> None:
        """A WAN's latency: every byte through the link waits `one_way_ms` each way (a round trip twice that)."""
        for stream in ("upstream", "downstream"):
            self._call("POST", f"/proxies/{name}/toxics", {"name": f"latency-{stream}", "type": "latency",
                                                          "stream": stream, "attributes": {"latency": one_way_ms}})

    def undelay(self, name: str) -> None:
        for stream in ("upstream", "downstream"):
            self._call("DELETE", f"/proxies/{name}/toxics/latency-{stream}")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read()
            is_json = reply.headers.get_content_type() == "application/json"
        return json.loads(text) if is_json and text.strip() else text.decode(errors="replace")

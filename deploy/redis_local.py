"""A throwaway local redis-server (Debian's package) for the live-class tests and benchmarks, and
for trying several replicas on one machine:

    with LocalRedis() as r:            # redis-server --port <free> --save "" --appendonly no
        os.environ["ROOM_STORE"] = r.url   # redis://127.0.0.1:<port>/0

Nothing is written to disk (no RDB snapshot, no append-only file); it binds 127.0.0.1 only and is
stopped when the block ends. `make redis` installs the package (as `make nginx` does nginx).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class RedisUnavailable(RuntimeError):
    pass


def find_redis() -> str:
    path = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
    if not path:
        raise RedisUnavailable("redis-server is not installed. Run `make redis` (as root) or "
                               "`sudo apt-get install -y --no-install-recommends redis-server`")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRedis:
    def __init__(self, port: int | None = None):
        self.port = port or _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.dir = tempfile.mkdtemp(prefix="attention-lab-redis-")

    def start(self) -> "LocalRedis":
        exe = find_redis()
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir, "--protected-mode", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RedisUnavailable(f"redis-server exited during start (code {self.proc.returncode})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RedisUnavailable("redis-server did not answer within 15 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port: an empty store (nothing was saved)."""
        self.stop()
        self.start()

    def __enter__(self) -> "LocalRedis":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

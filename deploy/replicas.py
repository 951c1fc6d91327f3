"""Serve a class: N Attention Lab replicas behind nginx (sticky sessions, WebSocket upgrade).

    python -m deploy.replicas                       # 2 replicas + nginx on http://127.0.0.1:8080
    python -m deploy.replicas --replicas 4 --port 80 --listen 0.0.0.0   # a real class server

Each replica is an ordinary `streamlit run app.py` process with the production config
(deploy/streamlit-prod.toml, passed as command-line flags so the development config in
.streamlit/ stays as it is) on 127.0.0.1:<free port>. nginx (Debian's package; installed with
apt-get when missing and we are root, like `make chromium`) is rendered from
deploy/nginx.conf.template into a private run directory and started in the foreground. Ctrl+C
stops everything. Why several processes: one Streamlit process runs every session's script in a
thread of one Python interpreter, so one process uses about one core's worth of Python; N
replicas use N cores (see docs/deployment.md).
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python deploy/replicas.py` as well as `python -m deploy.replicas`
    sys.path.insert(0, str(ROOT))

from deploy.server import Server, free_port, wait_healthy  # noqa: E402

HERE = Path(__file__).resolve().parent
PROD_CONFIG = HERE / "streamlit-prod.toml"
TEMPLATE = HERE / "nginx.conf.template"


class NginxUnavailable(RuntimeError):
    pass


def prod_flags(config: Path = PROD_CONFIG) -> list[str]:
    """The production config as `--section.key value` flags (Streamlit accepts every option so)."""
    data = tomllib.loads(config.read_text())
    flags = []
    for section, opts in data.items():
        for key, value in opts.items():
            v = str(value).lower() if isinstance(value, bool) else str(value)
            flags += [f"--{section}.{key}", v]
    return flags


def find_nginx(install: bool = True) -> str:
    """Path of Debian's nginx; apt-get installs it when missing and we are root."""
    path = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if path:
        return path
    if not install:
        raise NginxUnavailable("nginx is not installed")
    if os.geteuid() != 0:
        raise NginxUnavailable("nginx is not installed and this is not root. Run: "
                               "sudo apt-get install -y --no-install-recommends nginx")
    print("Installing Debian's nginx ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx"], check=True,
                       env=env, stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise NginxUnavailable(f"apt-get install nginx failed: {exc}") from exc
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(path).exists():
        raise NginxUnavailable("apt-get ran but no nginx binary was found")
    return path


def render(run_dir: Path, listen: str, upstreams: list[str], max_body_mb: int, proxy_secret: str) -> str:
    """The nginx config. proxy_secret: what nginx sends the replicas in the X-Attention-Lab-Proxy
    header (ui.live.PROXY_HEADER), so that they trust the X-Forwarded-For entry nginx appended
    (the client's address, for the live class's per-client limits) and no header a client sends."""
    if not proxy_secret or not proxy_secret.replace("-", "").replace("_", "").isalnum():
        raise ValueError("the proxy secret must be a non-empty URL-safe token")
    text = TEMPLATE.read_text()
    values = {
        "PROXY_SECRET": proxy_secret,
        "RUN": str(run_dir),
        "LISTEN": listen,
        "SERVERS": "\n".join(f"        server {u} max_fails=3 fail_timeout=10s;" for u in upstreams),
        "MAX_BODY_MB": str(max_body_mb),
        # As root, nginx's workers drop to an unprivileged user; elsewhere the directive is ignored.
        "USER_LINE": "user nobody nogroup;" if os.geteuid() == 0 else "",
    }
    for k, v in values.items():
        text = text.replace("${" + k + "}", v)
    if "${" in text:
        raise ValueError(f"unfilled placeholder in {TEMPLATE}: {text[text.index('${'):][:40]}")
    return text


class Deployment:
    """`with Deployment(replicas=2) as d:` -> d.url (the proxy), d.replicas (Server objects)."""

    def __init__(self, replicas: int = 2, port: int | None = None, listen_host: str = "127.0.0.1",
                 app: str = "app.py", log_dir: Path | None = None):
        self.n, self.port, self.listen_host, self.app = replicas, port or free_port(), listen_host, app
        self.run_dir = Path(tempfile.mkdtemp(prefix="attention-lab-nginx-"))
        os.chmod(self.run_dir, 0o755)  # nginx workers (user nobody) create temp files under it
        self.log_dir = log_dir
        self.replicas: list[Server] = []
        self.proxy_secret = secrets.token_urlsafe(24)  # nginx -> replicas: "this request came through me"
        self.nginx: subprocess.Popen | None = None
        self.url = f"http://{'127.0.0.1' if listen_host in ('0.0.0.0', '::') else listen_host}:{self.port}"

    def start(self) -> "Deployment":
        nginx = find_nginx()
        flags = prod_flags()
        max_mb = int(tomllib.loads(PROD_CONFIG.read_text())["server"]["maxUploadSize"])
        try:
            for i in range(self.n):
                log = (self.log_dir / f"replica-{i}.log") if self.log_dir else None
                # Server adds --server.address localhost; the later flag wins: bind 127.0.0.1 only.
                # "Open a model from disk" is off in production unless the admin set ATTENTION_LAB_DISK_MODELS=1
                env = {"ATTENTION_LAB_DISK_MODELS": os.environ.get("ATTENTION_LAB_DISK_MODELS", "0"),
                       "ATTN_LAB_PROXY_SECRET": self.proxy_secret}
                s = Server(self.app, extra=[*flags, "--server.address", "127.0.0.1"], log=log, env=env)
                self.replicas.append(s.start())
            conf = self.run_dir / "nginx.conf"
            conf.write_text(render(self.run_dir, f"{self.listen_host}:{self.port}",
                                   [f"127.0.0.1:{s.port}" for s in self.replicas], max_mb, self.proxy_secret))
            test = subprocess.run([nginx, "-t", "-q", "-p", str(self.run_dir), "-e", str(self.run_dir / "error.log"),
                                   "-c", str(conf)], capture_output=True, text=True)
            if test.returncode != 0:
                raise RuntimeError(f"nginx -t failed: {test.stderr.strip()}")
            self.nginx = subprocess.Popen([nginx, "-p", str(self.run_dir), "-e", str(self.run_dir / "error.log"),
                                           "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          start_new_session=True)
            wait_healthy(self.url, self.nginx, timeout=30)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)  # graceful: finish open requests
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait(5)
        self.nginx = None
        for s in self.replicas:
            s.stop()
        self.replicas = []

    def access_log(self) -> str:
        p = self.run_dir / "access.log"
        return p.read_text() if p.exists() else ""

    def __enter__(self) -> "Deployment":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m deploy.replicas", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--listen", default="127.0.0.1", help="address nginx listens on (0.0.0.0 for a class)")
    a = ap.parse_args(argv)
    d = Deployment(a.replicas, a.port, a.listen, log_dir=None)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with d:
        print(f"Attention Lab: {a.replicas} replicas ({', '.join(s.url for s in d.replicas)}) behind nginx "
              f"at http://{a.listen}:{a.port}  (run dir {d.run_dir}; Ctrl+C stops)", flush=True)
        try:
            while not stop:
                if d.nginx is None or d.nginx.poll() is not None:
                    print("nginx exited", file=sys.stderr)
                    return 1
                for s in d.replicas:
                    if s.proc is None or s.proc.poll() is not None:
                        print(f"replica {s.url} exited", file=sys.stderr)
                        return 1
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

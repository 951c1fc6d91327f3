"""`make class`: serve the app on every network interface for a lecture hall, and print the address
students should open (deploy/network.py: ATTN_LAB_PUBLIC_URL, else this machine's network address).

    python -m deploy.serve_class --port 8501

The same port rules as `make run` (PORT, default 8501). The join card in the app shows the same
address as a link and a QR code. Opening a model from disk stays a loopback-only action.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.network import PUBLIC_URL_ENV, network_address, public_url  # noqa: E402


def students_address(port: int) -> tuple[str | None, str]:
    """(the address students open, a sentence for the terminal)."""
    pub = public_url(os.environ.get(PUBLIC_URL_ENV))
    if pub:
        return pub, f"Students open {pub}/ ({PUBLIC_URL_ENV}); the join card shows the class's link and QR code."
    lan = network_address()
    if lan:
        url = f"http://{lan}:{port}"
        return url, (f"Students open {url}/ on the same network (this machine's address); "
                     "the join card shows the class's link and QR code.")
    return None, ("This machine has no network address but loopback: only this computer can open the app. "
                  "Connect to the lecture hall's network and run `make class` again.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8501)))
    ap.add_argument("--dry-run", action="store_true", help="print the address and the command, start nothing")
    args = ap.parse_args(argv)
    try:
        _, sentence = students_address(args.port)
    except ValueError as exc:
        print(f"make class: {exc}", file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "0.0.0.0",
           "--server.port", str(args.port), "--server.headless", "true"]
    print(sentence, flush=True)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    os.chdir(ROOT)
    os.execv(sys.executable, cmd)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())

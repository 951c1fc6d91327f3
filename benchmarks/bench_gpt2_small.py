"""Every page with the "GPT-2 small" sidebar preset (fresh weights: d_model 768, 12 heads, 12 layers,
context 1,024), against the default toy model in the same run: what is slow (issue 34 point 3).

For each page: the server time of the first visit (the page's first run in a session that has already
built the model) and of a rerun after a new sentence, in AppTest (server side only; the browser's paint
is measured by bench_long / bench_pages). Ratios to the toy model's times in the same run.

    python -m benchmarks.bench_gpt2_small [--only heads] [--words 1000 --T 1024]
"""
from __future__ import annotations

import argparse
import os
import time

from tests.helpers import app_pages, app_test, errors
from ui import state

SENTENCE = "the quick brown fox jumps over the lazy dog near a river bank"


def session(preset: str | None, T: int):
    """An AppTest session on the app's default model, or the fresh-weights preset built once; the
    max-length slider at T (0: its default), capped at the model's limit."""
    at = app_test(default_timeout=900)
    if preset:
        at.query_params["src"] = state.FRESH
    at.run()
    if preset:
        at.sidebar.button(key=f"preset_{preset}").click().run()
    if T:
        slider = at.sidebar.slider(key="T")
        slider.set_value(min(T, slider.max)).run()
    assert not errors(at), errors(at)
    return at


def visit(at, page: str, text: str) -> tuple[float, float, list[str]]:
    """(first visit s, rerun after a new sentence s, errors)."""
    t0 = time.perf_counter()
    at.switch_page(page).run()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    at.sidebar.text_input(key="text").set_value(text).run()
    again = time.perf_counter() - t0
    return first, again, errors(at)


def measure(pages: list[str], text: str, T: int = 0) -> list[dict]:
    """One row per page: GPT-2 small's and the toy model's first visit and rerun (s), same run."""
    toy, gpt2 = session(None, T), session("gpt2", T)
    rows = []
    for page in pages:
        t1, t2, e1 = visit(toy, page, text + " .")
        g1, g2, e2 = visit(gpt2, page, text + " .")
        rows.append(dict(page=page, gpt2_first=g1, gpt2_rerun=g2, toy_first=t1, toy_rerun=t2, errors=e1 + e2,
                         T=(toy.session_state["T"], gpt2.session_state["T"])))
        for at in (toy, gpt2):  # back to the sentence both start from
            at.sidebar.text_input(key="text").set_value(text).run()
    return rows


def run(quick: bool = False) -> list[dict]:
    """benchmarks/run_all's rows: every page's first visit with GPT-2 small (quick: three pages)."""
    pages = [p for p in app_pages() if not quick or p in QUICK]
    rows = []
    for r in measure(pages, SENTENCE):
        rows.append(dict(benchmark=f"GPT-2 small preset (fresh weights), {r['page']}: first visit",
                         metric="server s (default toy model = baseline; AppTest)", app=round(r["gpt2_first"], 3),
                         bare=round(r["toy_first"], 3), ratio=r["gpt2_first"] / max(r["toy_first"], 1e-9),
                         target="informational", ok=None if not r["errors"] else False))
    return rows


QUICK = ("pages/heads.py", "pages/positional.py", "pages/cost.py")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="pages whose path contains this")
    ap.add_argument("--words", type=int, default=0, help="sentence length in words (0: the default sentence)")
    ap.add_argument("--T", type=int, default=0, help="the max-length slider (0: its default)")
    args = ap.parse_args()
    text = " ".join((SENTENCE.split() * 100)[: args.words]) if args.words else SENTENCE
    pages = [p for p in app_pages() if args.only in p]
    print(f"load average {os.getloadavg()[0]:.1f}; sentence of {len(text.split())} words")
    print("| page | GPT-2 small first visit s | rerun s | toy first visit s | rerun s | ratio (first, rerun) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in measure(pages, text, args.T):
        bad = f" errors: {r['errors']}" if r["errors"] else ""
        print(f"| {r['page']} | {r['gpt2_first']:.2f} | {r['gpt2_rerun']:.2f} | {r['toy_first']:.2f} | "
              f"{r['toy_rerun']:.2f} | {r['gpt2_first'] / r['toy_first']:.1f}×, {r['gpt2_rerun'] / r['toy_rerun']:.1f}× |{bad}",
              flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}; max length (toy, GPT-2 small) {r['T']}")


if __name__ == "__main__":
    main()

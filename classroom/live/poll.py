"""Class polls: the question a lecturer opens for the room, the students' answers, the tally and the
CSV. Pure Python and numpy: a question is built from a lesson question (classroom.lesson.Question)
or from the lecturer's current view (the attention weights of one layer and head), and its answer is
the one the engine computed. Everything here is plain data that travels through the room store as
JSON (to_dict / from_dict), so a poll opened on one server process is answered on another.
"""
from __future__ import annotations

import csv
import io
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from labels import md_escape, token_label

MAX_NICKNAME = 24  # characters kept of an optional nickname
MAX_BARS = 12  # distinct numeric answers shown as bars; the rest are counted as "other"
POLL_STATES = ("open", "closed", "revealed")


@dataclass(frozen=True)
class PollQuestion:
    """One question for the room. `prompt` and `explanation` are Markdown in which any user text
    (token labels) is already escaped; `answer` is what the engine computed."""
    prompt: str
    kind: str  # "choice" | "number"
    answer: str | float
    explanation: str = ""
    options: tuple[str, ...] = ()  # choice: the options in the order shown
    tolerance: float = 0.0  # number: |given - answer| <= tolerance counts as right
    lo: float = 0.0  # number: accepted range
    hi: float = 1e9
    step: float = 1.0
    source: str = ""  # where the question comes from ("lesson: Q3 of notes 000", "current view")

    def __post_init__(self) -> None:
        if self.kind not in ("choice", "number"):
            raise ValueError(f"kind must be 'choice' or 'number', not {self.kind!r}")
        if self.kind == "choice":
            if not self.options or str(self.answer) not in self.options:
                raise ValueError("a choice question needs options that include its answer")
            if len(set(self.options)) != len(self.options):
                raise ValueError("the options of a choice question must be distinct")
        elif not (math.isfinite(float(self.answer)) and self.lo <= float(self.answer) <= self.hi):
            raise ValueError("a number question's answer must be finite and within lo..hi")

    def parse(self, given) -> str | float:
        """A student's answer as stored: an option, or a finite number in lo..hi. ValueError says
        why not (an answer that is not one of the options is never counted)."""
        if self.kind == "choice":
            if not isinstance(given, str) or given not in self.options:
                raise ValueError("not one of the options")
            return given
        if isinstance(given, bool):
            raise ValueError("not a number")
        x = float(given)
        if not math.isfinite(x) or not self.lo <= x <= self.hi:
            raise ValueError(f"must be a number in {self.lo:g}..{self.hi:g}")
        return x

    def check(self, given) -> bool:
        if given is None:
            return False
        if self.kind == "number":
            try:
                return abs(float(given) - float(self.answer)) <= self.tolerance + 1e-9
            except (TypeError, ValueError):
                return False
        return str(given) == str(self.answer)

    def shown(self, value) -> str:
        """An answer as text (numbers with the precision of the question's step)."""
        if self.kind == "number":
            nd = 0 if self.step >= 1 else max(0, -int(math.floor(math.log10(self.step))))
            return f"{float(value):.{nd}f}"
        return str(value)

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "kind": self.kind, "answer": self.answer, "explanation": self.explanation,
                "options": list(self.options), "tolerance": self.tolerance, "lo": self.lo, "hi": self.hi,
                "step": self.step, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "PollQuestion":
        return cls(prompt=str(d["prompt"]), kind=str(d["kind"]), answer=d["answer"],
                   explanation=str(d.get("explanation", "")), options=tuple(str(o) for o in d.get("options", ())),
                   tolerance=float(d.get("tolerance", 0.0)), lo=float(d.get("lo", 0.0)), hi=float(d.get("hi", 1e9)),
                   step=float(d.get("step", 1.0)), source=str(d.get("source", "")))


@dataclass(frozen=True)
class Poll:
    """The room's current poll: `state` is "open" (answers accepted), "closed" (answers frozen) or
    "revealed" (closed, and everyone sees the answer)."""
    id: str
    question: PollQuestion
    state: str = "open"

    def __post_init__(self) -> None:
        if self.state not in POLL_STATES:
            raise ValueError(f"poll state must be one of {POLL_STATES}")

    def to_dict(self) -> dict:
        return {"id": self.id, "question": self.question.to_dict(), "state": self.state}

    @classmethod
    def from_dict(cls, d: dict) -> "Poll":
        return cls(id=str(d["id"]), question=PollQuestion.from_dict(d["question"]), state=str(d["state"]))


@dataclass(frozen=True)
class Answer:
    """One student session's answer to one poll (the latest it sent)."""
    poll_id: str
    value: str | float
    nickname: str = ""
    at: float = 0.0  # server time it was (last) given

    def to_dict(self) -> dict:
        return {"poll": self.poll_id, "value": self.value, "nick": self.nickname, "at": self.at}

    @classmethod
    def from_dict(cls, d: dict) -> "Answer":
        return cls(poll_id=str(d["poll"]), value=d["value"], nickname=str(d.get("nick", "")), at=float(d.get("at", 0.0)))


@dataclass(frozen=True)
class Tally:
    """What the lecturer's screen shows: `bars` (label, count) in display order (choice: every
    option, in the question's order; number: the distinct answers, most frequent first, at most
    MAX_BARS, then "other"), `n` answers in all, `right` of them right."""
    n: int
    right: int
    bars: tuple[tuple[str, int], ...] = field(default_factory=tuple)


_OPTION = re.compile(r"(\d+): (.*)", re.S)


def option_words(option: str) -> str:
    """A token option ("i: token", the token as the tokenizer labels it: "·" for a space, "↵" for a
    newline) as words a student reads: the token's visible text in quotes, spaces as spaces
    ("3: “ dog”"), a token of spaces only named as such ("5: a space"). Other options (numbers,
    lesson options) are returned as they are."""
    m = _OPTION.fullmatch(str(option))
    if m is None:
        return str(option)
    i, tok = m.groups()
    text = tok.replace("·", " ")
    if text and not text.strip(" "):
        return f"{i}: {'a space' if len(text) == 1 else f'{len(text)} spaces'}"
    return f"{i}: “{text}”"


def clean_nickname(raw) -> str:
    """An optional nickname: one line, no control characters, at most MAX_NICKNAME characters."""
    s = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in str(raw or ""))
    return " ".join(s.split())[:MAX_NICKNAME]


def tally(question: PollQuestion, answers: Sequence[Answer]) -> Tally:
    right = sum(question.check(a.value) for a in answers)
    if question.kind == "choice":
        counts = {o: 0 for o in question.options}
        for a in answers:
            if a.value in counts:
                counts[a.value] += 1
        return Tally(len(answers), right, tuple(counts.items()))
    counts: dict[str, int] = {}
    for a in answers:
        key = question.shown(a.value)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], float(kv[0])))
    bars = ranked[:MAX_BARS]
    if len(ranked) > MAX_BARS:
        bars.append(("other", sum(c for _, c in ranked[MAX_BARS:])))
    return Tally(len(answers), right, tuple(bars))


def _cell(text) -> str:
    """A CSV cell that a spreadsheet shows as text: a leading = + - @ (or tab/CR) would make Excel
    or LibreOffice read a student's nickname as a formula, so such cells get a leading apostrophe."""
    s = str(text)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def poll_csv(poll: Poll, answers: Sequence[Answer]) -> str:
    """One row per answer (in the order given), after a header: student (nickname, or "student N"),
    answer, right (yes/no), seconds after the first answer."""
    q = poll.question
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["question", "student", "answer", "right", "seconds"])
    t0 = min((a.at for a in answers), default=0.0)
    for i, a in enumerate(sorted(answers, key=lambda a: a.at), 1):
        w.writerow([_cell(_plain(q.prompt)), _cell(a.nickname or f"student {i}"), _cell(q.shown(a.value)),
                    "yes" if q.check(a.value) else "no", f"{a.at - t0:.1f}"])
    return out.getvalue()


def _plain(markdown: str) -> str:
    """The prompt without Markdown escapes (backslashes before punctuation) for the CSV."""
    out, esc = [], False
    for ch in markdown:
        if esc:
            out.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        else:
            out.append(ch.replace("*", ""))
    return "".join(out)


def from_lesson(q, step_title: str = "") -> PollQuestion:
    """A lesson question (classroom.lesson.Question, computed from the live trace) as a poll."""
    where = f"lesson{': ' + step_title if step_title else ''} ({q.source})"
    if q.kind == "choice":
        return PollQuestion(prompt=q.prompt, kind="choice", answer=str(q.answer), explanation=q.explanation,
                            options=tuple(q.options), source=where)
    return PollQuestion(prompt=q.prompt, kind="number", answer=float(q.answer), explanation=q.explanation,
                        tolerance=float(q.tolerance), lo=float(q.lo), hi=float(q.hi), step=float(q.step), source=where)


def attention_question(weights: np.ndarray, labels: Sequence[str], *, layer: int, head: int, query: int,
                       allowed: np.ndarray | None = None) -> PollQuestion:
    """"Which token does 'it' attend to most in layer L, head H?" from the current view.

    weights: (T, T) one head's attention weights (rows = queries, summing to 1); allowed: bool
    (T, T) or None (everything allowed). The options are the keys the query may attend to, as
    "i:token" labels; the answer is the key with the largest weight (the first, on a tie), as the
    engine computed it."""
    w = np.asarray(weights, dtype=float)
    T = len(labels)
    if w.shape != (T, T):
        raise ValueError(f"weights must be (T, T) = ({T}, {T}) for {T} labels, got {w.shape}")
    if not 0 <= query < T:
        raise ValueError(f"query must be in 0..{T - 1}")
    row_ok = np.ones(T, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool).reshape(T, T)[query]
    keys = [j for j in range(T) if row_ok[j]]
    if not keys:
        raise ValueError("this query may attend to no token (a fully masked row): pick another")
    best = max(keys, key=lambda j: (w[query, j], -j))
    options = tuple(token_label(j, labels[j], sep=": ") for j in keys)
    word = md_escape(labels[query])
    prompt = (f"Which token does **“{word}”** (position {query}) attend to most in **layer {layer}, head {head}**?")
    top = sorted(keys, key=lambda j: -w[query, j])[:3]
    expl = ("The engine's weights for this row: " +
            ", ".join(f"{md_escape(token_label(j, labels[j], sep=': '))} {w[query, j]:.3f}" for j in top) +
            (" (the largest first)." if len(top) > 1 else "."))
    return PollQuestion(prompt=prompt, kind="choice", answer=options[keys.index(best)], explanation=expl,
                        options=options, source=f"current view: layer {layer}, head {head}")


def head_share_question(heads: np.ndarray, target: str) -> PollQuestion:
    """"Which head writes most of *target*?" as a class poll, from a logit attribution's heads
    (L, H) (classroom.lesson.head_share_question; answered with the engine's shares)."""
    from classroom.lesson import head_share_question as lesson_question
    return from_lesson(lesson_question(heads, target), "Why this token?")

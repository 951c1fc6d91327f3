"""Automatic labels for attention heads: what pattern dominates a (Tq, Tk) weight matrix.

Scores (each in 0..1, averaged over the query rows that have a choice):
  previous-token: mean weight on key i-1 for query i (rows i >= 1)
  next-token:     mean weight on key i+1 for query i (rows 1 <= i <= T-2; 0 under a causal mask)
  self/diagonal:  mean weight on key i for query i (rows i >= 1)
  first-token sink: mean weight on key 0 (rows i >= 1)
  [CLS]/[SEP] sink: mean weight on the special tokens' keys (rows i >= 1), when the caller says
                  which keys are special (`special`, e.g. BERT's [CLS] and [SEP]); 0 otherwise.
                  Real BERT heads park most of their mass there when they have nothing to do.
  broad/uniform:  mean normalised entropy of the rows (1 = perfectly uniform over allowed keys)
  focused:        mean of each row's largest weight, over rows with at least 4 allowed keys: each
                  query puts most of its weight on ONE key, but which key depends on the words, not
                  on a fixed offset (content-based heads: a verb looking at its subject). The shipped
                  masked LM's heads are mostly like this; before this kind they were all "other".
The head gets the positional kind (all but "focused") whose score clears its threshold by the
largest margin; if none does, "focused" when its score clears its threshold; else "other".
With the sink hidden (label_heads(..., hide=keys), the attention views' "Hide the sink" switch):
the sink's weight is named beside the label (HeadPattern.sink) and the kind is decided on each
row renormalised over the other keys (hide_keys), without the two sink kinds. Real models park
most of a head's weight on the first token, so as computed most of SmolLM2's heads are "first-token
sink"; with the sink hidden they are labelled by what they do with the rest.
Pure numpy: used by the app's overview, the training tests and the train page.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

THRESHOLDS = {"previous-token": 0.4, "self/diagonal": 0.4, "first-token sink": 0.5, "broad/uniform": 0.9,
              "next-token": 0.4, "[CLS]/[SEP] sink": 0.5, "focused": 0.6}
FALLBACK = ("focused",)  # kinds that only label a head no positional kind fits


# A label whose deciding score is within this of its threshold is "borderline": it may flip on
# another sentence (e.g. previous-token 0.46 on one and 0.39 on the next, against 0.4).
BORDERLINE = 0.05

# Short names for small thumbnails (the overview of a 12-head model): a tenth of the chart wide.
SHORT = {"previous-token": "prev", "next-token": "next", "self/diagonal": "self", "first-token sink": "1st sink",
         "[CLS]/[SEP] sink": "CLS/SEP", "broad/uniform": "broad", "focused": "focus", "other": "other"}


@dataclass(frozen=True)
class HeadPattern:
    kind: str  # a key of THRESHOLDS ("previous-token", "next-token", "self/diagonal", "first-token sink",
    #            "[CLS]/[SEP] sink", "broad/uniform", "focused") or "other"
    score: float  # the score that decided it (for "other": the nearest kind's score, below its threshold)
    scores: dict[str, float]  # every kind's score, 0..1, keyed by the kinds of THRESHOLDS
    nearest: str = ""  # the kind whose score came closest to (or furthest past) its threshold
    sink: float | None = None  # judged with the sink hidden (label_heads(..., hide=keys)): the mean weight
    #                            the queries t >= 1 put on the hidden keys, named beside the label; the
    #                            kind was then decided on the rows renormalised over the other keys.
    #                            None: judged on the weights as computed (the sink is one of the kinds)

    @property
    def threshold(self) -> float:
        """The threshold of `nearest`, the kind that decided the label (NaN without one)."""
        return THRESHOLDS[self.nearest] if self.nearest else float("nan")

    @property
    def margin(self) -> float:
        """How far the deciding score is past its threshold (score − threshold of `nearest`): ≥ 0
        for a labelled head, < 0 for "other". Near 0 the label could flip on another sentence."""
        return self.score - THRESHOLDS[self.nearest] if self.nearest else 0.0

    def runner_up(self) -> tuple[str, float]:
        """The kind with the second-largest margin (score − threshold) and that margin."""
        margins = sorted(((v - THRESHOLDS[k], k) for k, v in self.scores.items() if k != self.nearest), reverse=True)
        return (margins[0][1], margins[0][0]) if margins else ("", float("nan"))

    def borderline(self, within: float = BORDERLINE) -> bool:
        """True when the label rests on a margin smaller than `within` (it may flip on another sentence)."""
        return abs(self.margin) < within

    def title(self) -> str:
        """Short label for a chart title: "previous-token 0.72", or for a head that clears no
        threshold "other (broad/uniform 0.85 < 0.9)": the nearest kind, its score and threshold
        (the score alone read as if 0.85 had decided "other")."""
        sink = "" if self.sink is None else f" · sink {self.sink:.2f}"
        if self.kind != "other":
            return f"{self.kind} {self.score:.2f}{sink}"
        t = THRESHOLDS[self.nearest]
        return f"other ({self.nearest} {below(self.score, t)} < {t:g}){sink}"

    def short(self, mark_borderline: bool = True, sink_sep: str = " ") -> str:
        """A thumbnail's label: "CLS/SEP .74", "prev 1.00", or "other"; "≈" marks a borderline label
        (margin under BORDERLINE: "prev ≈.42"). Too narrow for an "other" head's nearest pattern:
        the overview's table gives it. With the sink hidden (sink set), its share follows after
        sink_sep: "prev .70 sink .13" ("<br>" puts it on a line of its own)."""
        mark = "≈" if mark_borderline and self.borderline() else ""
        sink = "" if self.sink is None else sink_sep + f"sink {self.sink:.2f}".replace(" 0.", " .")
        if self.kind == "other":
            return "other" + sink
        return f"{SHORT[self.kind]} {mark}{self.score:.2f}".replace(" 0.", " .").replace("≈0.", "≈.") + sink


def below(score: float, threshold: float, digits: int = 2) -> str:
    """score (< threshold) written so that it reads as below threshold: 2 decimals, more when
    rounding would reach the threshold (0.4996 against 0.5 is "0.4996", never "0.50 < 0.5"; issue
    33), at most 6, then cut rather than rounded."""
    for d in range(digits, 7):
        text = f"{score:.{d}f}"
        if float(text) < threshold:
            return text
    return f"{math.floor(score * 1e6) / 1e6:.6f}"


def pattern_scores_all(weights: np.ndarray, special: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every kind's score for a stack of heads: (..., Tq, Tk) weights -> {kind: (...) array}.
    special: optional bool (Tk,), True at the special tokens' keys ([CLS], [SEP]).
    One vectorised pass (the pages label all heads of a layer, or of the model, on every rerun);
    pattern_scores is this for one head."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim < 2:
        raise ValueError(f"weights must be (..., Tq, Tk); got shape {w.shape}")
    lead, (Tq, Tk) = w.shape[:-2], w.shape[-2:]
    if special is not None:
        special = np.asarray(special, dtype=bool)
        if special.shape != (Tk,):
            raise ValueError(f"special must be a bool array of shape ({Tk},) (one flag per key); got {special.shape}")
    if Tq < 2 or Tk < 2:
        return {k: np.zeros(lead) for k in THRESHOLDS}
    rows = np.arange(1, min(Tq, Tk))  # query rows i >= 1: row 0 of a causal head has no choice
    W = w[..., rows, :]  # (..., n, Tk)
    live = W.sum(axis=-1) > 0.5  # (..., n) rows that are not fully masked
    n_live = live.sum(axis=-1)  # (...)

    def mean_live(x: np.ndarray) -> np.ndarray:  # (..., n) -> (...) mean over live rows, 0 if none
        return np.divide((x * live).sum(axis=-1), n_live, out=np.zeros(lead), where=n_live > 0)

    prev = mean_live(W[..., np.arange(len(rows)), rows - 1])
    diag = mean_live(W[..., np.arange(len(rows)), rows])
    sink = mean_live(W[..., 0])
    # next-token: rows 1..n-1 whose key i+1 exists (the last row has none)
    has_next = rows + 1 < Tk
    nxt_w = np.where(has_next, W[..., np.arange(len(rows)), np.minimum(rows + 1, Tk - 1)], 0.0)
    n_next = (live & has_next).sum(axis=-1)
    nxt = np.divide((nxt_w * live).sum(axis=-1), n_next, out=np.zeros(lead), where=n_next > 0)
    spec = mean_live(W[..., special].sum(axis=-1)) if special is not None and special.any() else np.zeros(lead)
    # entropy of each live row over its allowed keys, normalised by log(#allowed) (1 = uniform)
    pos = W > 0
    n_allowed = pos.sum(axis=-1)  # (..., n)
    h = -np.where(pos, W * np.log(np.where(pos, W, 1.0)), 0.0).sum(axis=-1)
    multi = live & (n_allowed > 1)
    ratio = np.divide(h, np.log(np.maximum(n_allowed, 2)), out=np.zeros_like(h), where=multi)
    n_multi = multi.sum(axis=-1)
    uniform = np.divide(ratio.sum(axis=-1), n_multi, out=np.zeros(lead), where=n_multi > 0)
    # focused: the largest weight of each live row with >= 4 allowed keys (a causal row 1 has 2 keys:
    # a peak there says little), averaged
    wide = live & (n_allowed >= 4)
    n_wide = wide.sum(axis=-1)
    focus = np.divide((W.max(axis=-1) * wide).sum(axis=-1), n_wide, out=np.zeros(lead), where=n_wide > 0)
    return {"previous-token": prev, "self/diagonal": diag, "first-token sink": sink, "broad/uniform": uniform,
            "next-token": nxt, "[CLS]/[SEP] sink": spec, "focused": focus}


SINK_KINDS = ("first-token sink", "[CLS]/[SEP] sink")  # the kinds a hidden sink removes from the contest


def hide_keys(weights: np.ndarray, keys: np.ndarray, *, min_left: int = 0) -> np.ndarray:
    """The "sink hidden" derived view: (..., Tq, Tk) weights with the `keys` columns (bool (Tk,))
    set to 0 and each row divided by what is left of it, so it sums to 1 over the other keys. A row
    with nothing left (it gave everything to the hidden keys, or it had no other allowed key) is all
    zero, never NaN; so is a row with fewer than `min_left` other keys of positive weight (labels
    use 2: a causal row 1 left with only itself would count as a perfect self/diagonal row)."""
    w = np.asarray(weights, dtype=np.float64)
    keys = np.asarray(keys, dtype=bool)
    if keys.shape != (w.shape[-1],):
        raise ValueError(f"keys must be a bool array of shape ({w.shape[-1]},) (one flag per key); got {keys.shape}")
    rest = np.where(keys, 0.0, w)
    total = rest.sum(-1, keepdims=True)
    ok = total > 1e-12
    if min_left:
        ok &= (rest > 0).sum(-1, keepdims=True) >= min_left
    return np.divide(rest, total, out=np.zeros_like(rest), where=ok)


def pattern_scores(weights: np.ndarray, special: np.ndarray | None = None) -> dict[str, float]:
    """One head's (Tq, Tk) weights -> {kind: score}."""
    w = np.asarray(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be (Tq, Tk); got shape {w.shape}")
    return {k: float(v) for k, v in pattern_scores_all(w, special).items()}


def label_head(weights: np.ndarray, special: np.ndarray | None = None, *, hide: np.ndarray | None = None
               ) -> HeadPattern:
    """(Tq, Tk) attention weights -> the dominant pattern and the score that decided it.
    special: optional bool (Tk,) marking the special tokens' keys (scores the [CLS]/[SEP] sink).
    hide: optional bool (Tk,), the sink's keys (label_heads)."""
    if hide is None:
        return _label(pattern_scores(weights, special))
    w = np.asarray(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be (Tq, Tk); got shape {w.shape}")
    return label_heads(w[None], special, hide=hide)[0]


def label_heads(weights: np.ndarray, special: np.ndarray | None = None, *, hide: np.ndarray | None = None) -> list:
    """(H, Tq, Tk) -> [HeadPattern] per head; (L, H, Tq, Tk) -> [[HeadPattern] per head] per layer.
    Scored in one vectorised pass; each label equals label_head of that head.
    hide: optional bool (Tk,), the attention sink's keys (key 0; [CLS] and [SEP] for BERT). Then the
    sink is named separately (HeadPattern.sink: the mean weight on those keys, queries t >= 1) and the
    kind is judged on the rows renormalised over the other keys (hide_keys, rows left with fewer
    than two keys dropped), the sink kinds out of the contest: a real model's heads, most of whose
    weight sits on the sink, are labelled by what they do with the rest."""
    w = np.asarray(weights)
    if w.ndim not in (3, 4):
        raise ValueError(f"weights must be (H, Tq, Tk) or (L, H, Tq, Tk); got shape {w.shape}")
    heads = w.reshape(-1, *w.shape[-2:])
    sink = None
    if hide is not None:
        hide = np.asarray(hide, dtype=bool)
        sink = pattern_scores_all(heads, hide)["[CLS]/[SEP] sink"]  # weight on the hidden keys, rows t >= 1
        sc = pattern_scores_all(hide_keys(heads, hide, min_left=2), special)
        sc = {k: v for k, v in sc.items() if k not in SINK_KINDS}
    else:
        sc = pattern_scores_all(heads, special)  # {kind: (N,)} over all heads
    flat = [_label({k: float(v[i]) for k, v in sc.items()}) for i in range(sc["previous-token"].shape[0])]
    if sink is not None:
        flat = [replace(p, sink=float(s)) for p, s in zip(flat, sink)]
    if w.ndim == 3:
        return flat
    H = w.shape[1]
    return [flat[layer * H:(layer + 1) * H] for layer in range(w.shape[0])]


def _label(s: dict[str, float]) -> HeadPattern:
    margins = {k: s[k] - THRESHOLDS[k] for k in s}
    positional = {k: m for k, m in margins.items() if k not in FALLBACK}
    best = max(positional, key=positional.get)
    if positional[best] >= 0:
        return HeadPattern(kind=best, score=s[best], scores=s, nearest=best)
    for k in FALLBACK:
        if margins[k] >= 0:
            return HeadPattern(kind=k, score=s[k], scores=s, nearest=k)
    best = max(margins, key=margins.get)
    return HeadPattern(kind="other", score=s[best], scores=s, nearest=best)

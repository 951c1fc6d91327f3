"""The hand-worked examples of the lecture notes (seeds/), as pure data, and the functions that
compute every step of them with the engine's own code (`model.attention.attend`; the masked
softmax and layer norm through classroom.scaling (softmax) and classroom.layer_norm, which call `model.attention.masked_softmax`
and `model.layers.layer_norm`; `model.layers.sinusoidal_table`).

Convention: the notes write row vectors, Q = X W_Q (X is T x d, W_Q is d x d_k). The engine's
nn.Linear stores W^T; here the matrices are used as the notes write them.

Each preset carries its inputs, "check your arithmetic" hints (where hand calculations go wrong)
and `errata`: every place where the notes' own arithmetic is wrong, with the correct value. The
errata were checked by hand and are asserted in tests/model/test_worked_examples.py.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from labels import token_labels
from model.attention import additive, attend, causal_allowed, combine, padding_allowed
from model.layers import sinusoidal_table

from .layer_norm import layer_norm
from .scaling import softmax

MASKS = ("none", "causal", "padding", "combined")
MAX_ABS = 1e6  # largest |value| in the attention calculator: keeps every product finite in float64


# --------------------------------------------------------------------------- attention calculator
@dataclass(frozen=True)
class AttentionSetup:
    """Everything the attention calculator needs. Arrays are float (row-vector convention)."""
    X: np.ndarray  # (T, d): the queries' source (decoder input in encoder-decoder attention)
    W_Q: np.ndarray  # (d, d)
    W_K: np.ndarray  # (d_kv, d)
    W_V: np.ndarray  # (d_kv, d)
    W_O: np.ndarray | None = None  # (d, d) or None: no output projection (output = concat)
    n_heads: int = 1
    mask: str = "none"  # one of MASKS
    padding: tuple[bool, ...] | None = None  # per key (and query) position, True = real token
    scale: bool = True  # divide by sqrt(d_k)
    mask_padded_queries: bool = True  # padding mask also blanks padded query rows (as the notes' 2D mask)
    X_kv: np.ndarray | None = None  # (Tk, d_kv): keys/values source (encoder output); None = self-attention
    labels: tuple[str, ...] = ()  # query labels
    kv_labels: tuple[str, ...] = ()  # key labels (cross-attention)


@dataclass(frozen=True)
class AttentionSteps:
    """Every intermediate as numpy. H heads, Tq queries, Tk keys."""
    Q: np.ndarray  # (Tq, H*d_k)  X W_Q
    K: np.ndarray  # (Tk, H*d_k)
    V: np.ndarray  # (Tk, H*d_v)
    q: np.ndarray  # (H, Tq, d_k)  per head
    k: np.ndarray  # (H, Tk, d_k)
    v: np.ndarray  # (H, Tk, d_v)
    scores: np.ndarray  # (H, Tq, Tk)  q k^T
    scale: float
    scaled: np.ndarray  # (H, Tq, Tk)
    allowed: np.ndarray  # (Tq, Tk) bool
    mask01: np.ndarray  # (Tq, Tk) 1 = may attend, 0 = masked
    additive: np.ndarray  # (Tq, Tk) 0 / -inf
    masked: np.ndarray  # (H, Tq, Tk)  scaled + additive
    weights: np.ndarray  # (H, Tq, Tk)
    fully_masked: np.ndarray  # (Tq,) bool: rows with nothing allowed (weights all 0)
    heads: np.ndarray  # (H, Tq, d_v)
    concat: np.ndarray  # (Tq, H*d_v)
    output: np.ndarray  # (Tq, d_out)  concat W_O, or concat when there is no W_O
    d_k: int


def validate(setup: AttentionSetup) -> list[str]:
    """Problems that stop the computation, each saying what to fix (empty list = fine)."""
    out: list[str] = []
    X, kv = setup.X, (setup.X if setup.X_kv is None else setup.X_kv)
    for name, a in (("X", X),) + ((("keys/values input", kv),) if setup.X_kv is not None else ()) + (("W_Q", setup.W_Q), ("W_K", setup.W_K),
                    ("W_V", setup.W_V)) + ((("W_O", setup.W_O),) if setup.W_O is not None else ()):
        a = np.asarray(a)
        if a.ndim != 2 or 0 in a.shape:
            out.append(f"{name} must be a non-empty matrix; got shape {a.shape}.")
        elif not np.all(np.isfinite(a)):
            out.append(f"{name} contains a value that is not a finite number.")
        elif np.abs(a).max() > MAX_ABS:
            out.append(f"{name} has a value beyond ±{MAX_ABS:,.0f}: this calculator is for hand-sized numbers.")
    if out:
        return out
    d = X.shape[1]
    if setup.W_Q.shape[0] != d:
        out.append(f"W_Q needs {d} rows (one per column of X); it has {setup.W_Q.shape[0]}.")
    for name, W in (("W_K", setup.W_K), ("W_V", setup.W_V)):
        if W.shape[0] != kv.shape[1]:
            out.append(f"{name} needs {kv.shape[1]} rows (one per column of its input); it has {W.shape[0]}.")
    if setup.W_K.shape[1] != setup.W_Q.shape[1]:
        out.append(f"W_Q and W_K need the same number of columns (d_k); they have {setup.W_Q.shape[1]} and {setup.W_K.shape[1]}.")
    h = setup.n_heads
    if h < 1 or setup.W_Q.shape[1] % h:
        out.append(f"{h} heads must divide the projection width of Q and K ({setup.W_Q.shape[1]}).")
    elif setup.W_V.shape[1] % h:  # V may be wider or narrower than K (d_v ≠ d_k), split alike
        out.append(f"{h} heads must divide the width of V ({setup.W_V.shape[1]}).")
    if setup.W_O is not None and setup.W_O.shape[0] != setup.W_V.shape[1]:
        out.append(f"W_O needs {setup.W_V.shape[1]} rows (the concat width); it has {setup.W_O.shape[0]}.")
    if setup.mask not in MASKS:
        out.append(f"mask must be one of {MASKS}.")
    if setup.mask in ("padding", "combined"):
        n = kv.shape[0]
        if setup.padding is None or len(setup.padding) != n:
            out.append(f"the padding row needs one 1/0 per key position ({n}).")
    return out


def allowed_mask(setup: AttentionSetup) -> torch.Tensor:
    """(Tq, Tk) bool from the engine's mask functions (True = may attend)."""
    tq = setup.X.shape[0]
    tk = tq if setup.X_kv is None else setup.X_kv.shape[0]
    parts = []
    if setup.mask in ("causal", "combined"):
        parts.append(causal_allowed(tq, tk))
    if setup.mask in ("padding", "combined"):
        keys = torch.tensor([bool(p) for p in setup.padding], dtype=torch.bool)
        if setup.X_kv is None:
            parts.append(padding_allowed(keys[None], mask_queries=setup.mask_padded_queries)[0, 0])
        else:  # cross-attention: padding is on the encoder (key) side only
            parts.append(keys[None, :].expand(tq, tk))
    m = combine(*parts)
    return torch.ones(tq, tk, dtype=torch.bool) if m is None else m


def compute_attention(setup: AttentionSetup) -> AttentionSteps:
    """Every step, through `model.attention.attend` (the function the model uses)."""
    problems = validate(setup)
    if problems:
        raise ValueError(" ".join(problems))
    f64 = torch.float64
    X = torch.as_tensor(np.asarray(setup.X, dtype=float), dtype=f64)
    Xkv = X if setup.X_kv is None else torch.as_tensor(np.asarray(setup.X_kv, dtype=float), dtype=f64)
    Q = X @ torch.as_tensor(setup.W_Q, dtype=f64)  # (Tq, H*d_k)
    K = Xkv @ torch.as_tensor(setup.W_K, dtype=f64)  # (Tk, H*d_k)
    V = Xkv @ torch.as_tensor(setup.W_V, dtype=f64)  # (Tk, H*d_v)
    H = setup.n_heads
    d_k, d_v = Q.shape[1] // H, V.shape[1] // H

    def split(M: torch.Tensor, dh: int) -> torch.Tensor:
        return M.view(M.shape[0], H, dh).transpose(0, 1)  # (H, T, dh)

    q, k, v = split(Q, d_k), split(K, d_k), split(V, d_v)
    allowed = allowed_mask(setup)
    tr = attend(q, k, v, allowed=allowed, scale=None if setup.scale else 1.0)
    concat = tr.heads.transpose(0, 1).reshape(q.shape[1], H * d_v)  # (Tq, H*d_v)
    out = concat if setup.W_O is None else concat @ torch.as_tensor(setup.W_O, dtype=f64)
    a = allowed.numpy()
    return AttentionSteps(
        Q=Q.numpy(), K=K.numpy(), V=V.numpy(), q=q.numpy(), k=k.numpy(), v=v.numpy(),
        scores=tr.scores.numpy(), scale=float(tr.scale), scaled=tr.scaled.numpy(), allowed=a,
        mask01=a.astype(float), additive=additive(allowed).double().numpy(), masked=tr.masked.numpy(),
        weights=tr.weights.numpy(), fully_masked=tr.fully_masked.numpy().reshape(-1, a.shape[0]).any(axis=0),
        heads=tr.heads.numpy(), concat=concat.numpy(), output=out.numpy(), d_k=d_k)


def softmax_from_scores(scores: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """Row softmax of given scores (float64) where allowed: used for the notes' made-up score
    matrices, through the one masked softmax (classroom.scaling.softmax -> the engine's)."""
    return softmax(scores, allowed=allowed)


# --------------------------------------------------------------------------- small calculators
def softmax_temperature(x, temperature: float = 1.0) -> np.ndarray:
    """softmax(x / T) of the calculator's numbers (checked first, with messages for the page),
    through the one masked softmax (classroom.scaling.softmax -> the engine's)."""
    if not temperature > 0:
        raise ValueError("the temperature must be > 0")
    x = np.asarray(x, dtype=float).reshape(1, -1)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("give at least one finite number")
    with np.errstate(over="ignore"):
        if not np.all(np.isfinite(x / temperature)):
            raise ValueError("the scores divided by the temperature are too large to represent: use smaller numbers")
    return softmax(x, temperature)[0]


@dataclass(frozen=True)
class LayerNormSteps:
    x: np.ndarray
    mean: float
    var: float  # biased (divide by D), as F.layer_norm
    eps: float
    std: float  # sqrt(var + eps)
    normalized: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray
    output: np.ndarray


def layer_norm_steps(x, eps: float = 1e-5, gamma=None, beta=None) -> LayerNormSteps:
    """Layer norm of one vector through the engine's layer norm (classroom.layer_norm.layer_norm ->
    model.layers.layer_norm), float64."""
    x = np.asarray(x, dtype=float).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("give at least one finite number")
    if not eps > 0:
        raise ValueError("ε must be > 0")
    gamma = np.ones_like(x) if gamma is None else np.asarray(gamma, dtype=float).ravel()
    beta = np.zeros_like(x) if beta is None else np.asarray(beta, dtype=float).ravel()
    if gamma.shape != x.shape or beta.shape != x.shape:
        raise ValueError(f"γ and β need {x.size} numbers each (one per entry of x)")
    ln = layer_norm(x, gamma, beta, float(eps))
    var = float(ln.var)
    if not (math.isfinite(var) and np.all(np.isfinite(ln.output))):
        raise ValueError("the numbers are too large: their variance overflows (use values below about 1e150)")
    return LayerNormSteps(x=x, mean=float(ln.mean), var=var, eps=float(eps), std=math.sqrt(var + eps),
                          normalized=ln.normalized, gamma=gamma, beta=beta, output=ln.output)


def pe_table(n_positions: int, d_model: int, start: int = 0) -> np.ndarray:
    """(n_positions, d_model) sinusoidal PE rows for positions start..start+n-1: the engine's
    `model.layers.sinusoidal_table` in float64 (its float32 model table would show cos(0.01) =
    0.99995 as 0.9999 at 4 decimals)."""
    if d_model < 1 or n_positions < 1 or start < 0:
        raise ValueError("d_model and the number of positions must be >= 1, positions >= 0")
    return sinusoidal_table(n_positions, d_model, start=start, dtype=torch.float64).numpy()


def pe_value(pos: int, i: int, d_model: int) -> tuple[float, str]:
    """PE(pos, i) for dimension index i (0-based) and the formula used, as LaTeX."""
    if not 0 <= i < d_model:
        raise ValueError(f"the dimension i must be in 0..{d_model - 1}")
    two_i = i - (i % 2)
    fn = "sin" if i % 2 == 0 else "cos"
    val = float(pe_table(1, d_model, start=pos)[0, i])
    # three short lines: fits a narrow column
    angle = pos / 10000.0 ** (two_i / d_model)
    tex = (rf"\begin{{aligned}} PE({pos},{i}) &= \{fn}\left({pos} / 10000^{{{two_i}/{d_model}}}\right) \\ "
           rf"&= \{fn}({angle:.6g}) \\ &= {val:.4f} \end{{aligned}}")
    return val, tex


# --------------------------------------------------------------------------- presets
@dataclass(frozen=True)
class Erratum:
    where: str  # what the notes compute
    notes: str  # what the notes write
    correct: str  # the correct value and why


@dataclass(frozen=True)
class Preset:
    key: str
    title: str
    source: str  # which note
    kind: str  # "attention" | "layernorm" | "pe"
    description: str
    hints: tuple[str, ...]
    errata: tuple[Erratum, ...] = ()
    setup: AttentionSetup | None = None
    vector: tuple[float, ...] = ()  # layer norm input
    eps: float = 1e-5
    d_model: int = 4  # PE
    positions: int = 3
    embeddings: tuple[tuple[float, ...], ...] = ()  # PE: word embeddings to add
    words: tuple[str, ...] = ()


I4 = np.eye(4)
THE_CAT_SAT = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], dtype=float)
EMB3 = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]])
PADDED = np.vstack([EMB3, np.zeros((1, 4))])
DEC_Q = np.array([[0.2, 0.4, 0.6, 0.8], [0.1, 0.3, 0.5, 0.7]])
# The notes' made-up decoder scores (003): not computed from D, used to check their softmax.
NOTES_DECODER_SCORES = np.array([[1.0, 0.8], [0.9, 1.1]])
# RNN encoder-decoder with attention (004, eq. 5): annotations h_j of "I like cats" (rows) and two
# decoder states s_0, s_1 (before writing "Me" and "gustan").
ANNOTATIONS = np.array([[1.0, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1]])
DEC_STATES = np.array([[2.0, 0, 0, 0], [0, 2, 1, 0]])

PRESETS: dict[str, Preset] = {p.key: p for p in [
    Preset(
        "the-cat-sat", "The / CAT / SAT, identity weights (d_k = 4)", "004 (self-attention in detail)", "attention",
        "Embeddings The=[1,0,1,0], CAT=[0,1,0,1], SAT=[1,1,1,1]; W_Q = W_K = W_V = I, one head, no mask. "
        "So Q = K = V = X.",
        (
            "Softmax takes the *scaled* scores: The [1, 0, 1], CAT [0, 1, 1], SAT [1, 1, 2] — not the raw "
            "scores [0, 2, 2] and [2, 2, 4].",
            "In the weighted sum each weight multiplies its own value vector once: "
            "0.4223·The + 0.1554·CAT + 0.4223·SAT. Adding 0.4223 twice into a coordinate gives the "
            "notes' wrong 1.2669.",
            "W = I is 4 × 4 here (d_model = 4), so Q, K, V keep all four coordinates.",
        ),
        (
            Erratum("Q_The = [1 0 1] · I", "a 3 × 3 identity and a 3-vector", "the embeddings have 4 entries: Q_The = [1, 0, 1, 0] · I₄ = [1, 0, 1, 0]"),
            Erratum("weights of CAT", "Softmax([0, 2, 2]) = [0.1554, 0.4223, 0.4223]",
                    "the scaled scores are [0, 1, 1]; softmax([0, 1, 1]) = [0.1554, 0.4223, 0.4223] "
                    "(softmax of the raw [0, 2, 2] would be [0.0634, 0.4683, 0.4683])"),
            Erratum("weights of SAT", "Softmax([2, 2, 4]) = [0.2119, 0.2119, 0.5762]",
                    "the scaled scores are [1, 1, 2]; softmax([1, 1, 2]) = [0.2119, 0.2119, 0.5761] "
                    "(softmax of the raw [2, 2, 4] would be [0.1065, 0.1065, 0.7870])"),
            Erratum("output of The", "[1.2669, 0.9999, 1.2669, 0.9999]",
                    "[0.8446, 0.5777, 0.8446, 0.5777] (0.4223 + 0.4223 = 0.8446 in coordinates 1 and 3; "
                    "0.1554 + 0.4223 = 0.5777 in coordinates 2 and 4 — the notes add one weight too many)"),
        ),
        setup=AttentionSetup(THE_CAT_SAT, I4, I4, I4, labels=("The", "CAT", "SAT")),
    ),
    Preset(
        "scaling-6-4", "Scores [6, 4]: softmax with and without scaling", "004 (scaling)", "attention",
        "One query Q = [2, 3, 4, 1] against keys K₁ = [1, 0, 1, 0] and K₂ = [0, 1, 0, 1] (identity weights). "
        "Raw scores [6, 4]; d_k = 4, so √d_k = 2 and the scaled scores are [3, 2]. Toggle scaling to compare.",
        (
            "√d_k = √4 = 2, not √2: the scaled scores are [6/2, 4/2] = [3, 2].",
            "Without scaling softmax([6, 4]) = [0.8808, 0.1192]; with scaling softmax([3, 2]) = [0.7311, 0.2689]: "
            "scaling makes the weights less peaked.",
        ),
        (
            Erratum("scaled scores", "[6/√2, 4/√2] = [3, 2] and √d_k = √4 = √2",
                    "√4 = 2, so [6/2, 4/2] = [3, 2] (6/√2 = 4.2426 and 4/√2 = 2.8284 would give softmax "
                    "[0.8044, 0.1956])"),
            Erratum("softmax([10, 1])", "[0.99, 0.01]", "[0.99988, 0.00012] (1 / (1 + e⁻⁹) = 0.999877, e⁻⁹ / (1 + e⁻⁹) = 0.000123)"),
        ),
        setup=AttentionSetup(np.array([[2.0, 3, 4, 1]]), I4, I4, I4,
                             X_kv=np.array([[1.0, 0, 1, 0], [0, 1, 0, 1]]), labels=("Q",), kv_labels=("K1", "K2")),
    ),
    Preset(
        "layernorm-2468", "Layer norm of [2, 4, 6, 8]", "004 (layer normalization)", "layernorm",
        "x = [2, 4, 6, 8] (the vector of CAT), γ = 1, β = 0, ε = 1e-5.",
        (
            "The variance divides by D = 4 (biased, as PyTorch's layer norm), not by D − 1 = 3: σ² = 20/4 = 5.",
            "ε goes inside the square root: √(5 + 0.00001) = 2.23607.",
        ),
        (),
        vector=(2.0, 4.0, 6.0, 8.0),
    ),
    Preset(
        "pe-d4", "Positional encoding, d_model = 4, positions 0–2, embedding + PE", "004 (positional encoding)", "pe",
        "PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). "
        "The = [0.1, 0.2, 0.3, 0.4] at position 0, CAT = [0.5, 0.6, 0.7, 0.8] at 1, SAT = [0.9, 1.0, 1.1, 1.2] at 2.",
        (
            "The sin and cos of one pair share the exponent 2i/d: dimension 1 uses 10000^(0/4) and dimension 3 "
            "uses 10000^(2/4) — never 1/4 or 3/4.",
            "Angles are in radians: sin(1) = 0.8415, cos(1) = 0.5403.",
            "Add coordinate by coordinate; every coordinate changes (CAT: 0.7 + 0.01 = 0.71).",
        ),
        (
            Erratum("PE(0,1), PE(0,3), PE(1,1), PE(1,3)", "exponents 1/4 and 3/4, and the formula cos(pos/10000^((2i+1)/d))",
                    "the exponent is 2i/d for both members of a pair: PE(1,1) = cos(1/10000⁰) = cos 1 = 0.5403, "
                    "PE(1,3) = cos(1/10000^(2/4)) = cos 0.01 = 0.99995 (the notes' values happen to be right, their formula is not)"),
            Erratum("PE for CAT (position 1)", "[0.84, 0.54, 0.01, 0.995] and in the diagram [0.84, 0.34, 0.01, 0.99]",
                    "[0.8415, 0.5403, 0.0100, 0.99995] (0.99995 ≈ 1.0000, not 0.995; 0.34 is a typo)"),
            Erratum("CAT embedding", "[0.5 | 0.8 | 0.7 | 0.8] in one line", "[0.5, 0.6, 0.7, 0.8]"),
            Erratum("CAT + PE", "[1.34, 0.94, 0.01, 1.79]",
                    "[1.3415, 1.1403, 0.7100, 1.8000] (0.6 + 0.5403 = 1.1403; 0.7 + 0.01 = 0.71)"),
            Erratum("The + PE", "[0.1, 1.2, 0.3, 0.4]", "[0.1, 1.2, 0.3, 1.4] (0.4 + 1 = 1.4)"),
        ),
        d_model=4, positions=3, embeddings=tuple(map(tuple, EMB3)), words=("The", "CAT", "SAT"),
    ),
    Preset(
        "padded-batch", "4-token padded batch: look-ahead × padding mask", "004 (masked multi-head self-attention)", "attention",
        "Decoder input [1, 2, 3, 0] (0 = padding) with embeddings [0.1..0.4], [0.5..0.8], [0.9..1.2], [0, 0, 0, 0]; "
        "W_Q = W_K = W_V = I, d_k = 4. Combined mask = look-ahead × padding (the notes' 2D padding mask also "
        "blanks the padded query row).",
        (
            "The formula says QKᵀ/√d_k = QKᵀ/2: the scaled scores are [[0.15, …], [0.35, 0.87, …], [0.55, 1.39, 2.23, …]] "
            "— the notes use the raw QKᵀ after writing /2.",
            "Raw dot products: 0.5² + 0.6² + 0.7² + 0.8² = 1.74 (not 1.9); 0.5·0.9 + 0.6·1.0 + 0.7·1.1 + 0.8·1.2 = 2.78 "
            "(not 3.1); 0.9² + 1.0² + 1.1² + 1.2² = 4.46 (not 5.1).",
            "The padded query row (row 4) is masked entirely by the 2D padding mask: 1·0 = 0 in every cell. "
            "Its weights are all zero (flagged), never [1, 0, 0, 0]. With a keys-only padding mask it would be "
            "[1/3, 1/3, 1/3, 0].",
            "Additive form: allowed cells add 0 (not 1), masked cells add −∞.",
        ),
        (
            Erratum("scores", "[[0.3, 0.7, 1.1, 0], [0.7, 1.9, 3.1, 0], [1.1, 3.1, 5.1, 0], [0, 0, 0, 0]] labelled QKᵀ/√d_k",
                    "raw QKᵀ = [[0.30, 0.70, 1.10, 0], [0.70, 1.74, 2.78, 0], [1.10, 2.78, 4.46, 0], [0, 0, 0, 0]]; "
                    "scaled (/2) = [[0.15, 0.35, 0.55, 0], [0.35, 0.87, 1.39, 0], [0.55, 1.39, 2.23, 0], [0, 0, 0, 0]]"),
            Erratum("combined mask, row 4", "[1·1, 1·1, 1·1, 1·0] = [1, 1, 1, 0]",
                    "the 2D padding mask's row 4 is [0, 0, 0, 0], so the product is [0, 0, 0, 0]"),
            Erratum("additive mask", "[[1, −∞, −∞, −∞], …] (1 where allowed)", "0 where allowed, −∞ where masked"),
            Erratum("softmax", "[[1, 0, 0, 0], [0.3, 0.7, 0, 0], [0.1, 0.3, 0.6, 0], [1.0, 0, 0, 0]]",
                    "[[1, 0, 0, 0], [0.3729, 0.6271, 0, 0], [0.1152, 0.2668, 0.6180, 0], [0, 0, 0, 0]] "
                    "(row 4 fully masked; even with the notes' unscaled scores row 2 would be [0.2315, 0.7685])"),
        ),
        setup=AttentionSetup(PADDED, I4, I4, I4, mask="combined", padding=(True, True, True, False),
                             labels=("1", "2", "3", "0 (pad)")),
    ),
    Preset(
        "decoder-2x2", "Decoder masked self-attention, 2 × 2", "003 (decoder self-attention)", "attention",
        "\"Me gustan\": D = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], W_Q = W_K = W_V = I, d_k = 4, causal mask.",
        (
            "The notes' scores [[1.0, 0.8], [0.9, 1.1]] are illustrative, not computed from D: with W = I the raw "
            "scores are [[0.30, 0.70], [0.70, 1.74]] and the scaled ones [[0.15, 0.35], [0.35, 0.87]].",
            "softmax([0.9, 1.1]) = [0.4502, 0.5498] — rounding to [0.4, 0.6] changes the output in the second decimal.",
            "Write D·W_Q (rows are tokens), not W_Q·D.",
        ),
        (
            Erratum("Q = W_Q · D", "W_Q · D", "D · W_Q (D is T × d_model, W_Q is d_model × d_k)"),
            Erratum("softmax of the notes' scores, row 2", "softmax([0.9, 1.1]) = [0.4, 0.6]", "[0.4502, 0.5498]"),
            Erratum("output row 2 (with the notes' scores)", "[0.34, 0.44, 0.54, 0.64] (from the rounded weights)",
                    "[0.3199, 0.4199, 0.5199, 0.6199]; from D itself (scores computed) it is [0.3509, 0.4509, 0.5509, 0.6509]"),
        ),
        setup=AttentionSetup(EMB3[:2], I4, I4, I4, mask="causal", labels=("Me", "gustan")),
    ),
    Preset(
        "enc-dec-2x3", "Encoder–decoder attention, 2 × 3", "003 (encoder–decoder attention)", "attention",
        "\"I like cats\" → \"Me gustan\": encoder output E (3 × 4) gives K = V = E; the decoder query Q (2 × 4) = "
        "[[0.2, 0.4, 0.6, 0.8], [0.1, 0.3, 0.5, 0.7]]. Scores are T_dec × T_enc = 2 × 3; scaled by √4 = 2.",
        (
            "Q·Kᵀ, row 1: 0.2·0.1 + 0.4·0.2 + 0.6·0.3 + 0.8·0.4 = 0.60 — the notes' first row [0.3, 0.7, 1.1] is "
            "already halved, and then they halve it again in the scaling step.",
            "Row 2 is not a halving slip: 0.1·0.1 + 0.3·0.2 + 0.5·0.3 + 0.7·0.4 = 0.50, and half of [0.50, 1.14, 1.78] "
            "would be [0.25, 0.57, 0.89], not the notes' [0.26, 0.62, 0.98]: compute each dot product yourself.",
            "Row 2 of the context: 0.25·0.1 + 0.35·0.5 + 0.4·0.9 = 0.56 even with the notes' own weights (they write 0.65).",
            "Weights come from softmax of the scaled scores; they are not free to choose.",
        ),
        (
            Erratum("scores QKᵀ", "[[0.3, 0.7, 1.1], [0.26, 0.62, 0.98]]", "[[0.60, 1.40, 2.20], [0.50, 1.14, 1.78]]"),
            Erratum("scaled scores", "[[0.15, 0.35, 0.55], [0.13, 0.31, 0.49]]", "[[0.30, 0.70, 1.10], [0.25, 0.57, 0.89]]"),
            Erratum("attention weights", "[[0.2, 0.3, 0.5], [0.25, 0.35, 0.4]] (\"example\")",
                    "[[0.2120, 0.3162, 0.4718], [0.2340, 0.3222, 0.4438]]"),
            Erratum("context row 2", "[0.65, 0.75, 0.85, 0.95]",
                    "[0.56, 0.66, 0.76, 0.86] with the notes' weights; with the correct weights the context is "
                    "[[0.6039, 0.7039, 0.8039, 0.9039], [0.5839, 0.6839, 0.7839, 0.8839]]"),
        ),
        setup=AttentionSetup(DEC_Q, I4, I4, I4, X_kv=EMB3, labels=("Me", "gustan"), kv_labels=("I", "like", "cats")),
    ),
    Preset(
        "context-vector", "Context vector c_i = Σ α_ij h_j (RNN encoder–decoder with attention)",
        "004 (encoder–decoder, eq. 5)", "attention",
        "An RNN encoder maps \"I like cats\" to one annotation per word (the rows of E): h_I = [1, 0, 0, 1], "
        "h_like = [0, 1, 0, 1], h_cats = [0, 0, 1, 1]. The decoder's states s₀ = [2, 0, 0, 0] (before writing "
        "\"Me\") and s₁ = [0, 2, 1, 0] (before \"gustan\") are the queries (the rows of X). Score "
        "e_ij = s_{i−1} · h_j, weights α_ij = softmax over j, context c_i = Σ_j α_ij h_j. W = I, no scaling.",
        (
            "Scores are dot products: s₀ · h_I = 2, s₀ · h_like = 0, s₀ · h_cats = 0, so α₁ = softmax([2, 0, 0]) = "
            "[0.7870, 0.1065, 0.1065].",
            "c₁ = 0.7870·h_I + 0.1065·h_like + 0.1065·h_cats = [0.7870, 0.1065, 0.1065, 1]: one weighted average "
            "of the annotations, the size of one annotation. Every h_j ends in 1 and the weights sum to 1, so "
            "every c_i ends in 1: check yours.",
            "Each output word gets its own context: c₂ (for \"gustan\") leans on \"like\" (0.6652) and on "
            "\"cats\" (0.2447; gustan agrees with the plural). Without attention the decoder had one fixed "
            "vector for the whole sentence, which is why long sentences came out worse.",
            "Bahdanau et al. scored with a small network, e_ij = vᵀ tanh(W s_{i−1} + U h_j); the dot product used "
            "here is Luong et al.'s. The Transformer keeps the dot product and divides by √d_k (turn scaling on).",
        ),
        setup=AttentionSetup(DEC_STATES, I4, I4, I4, scale=False, X_kv=ANNOTATIONS, labels=("s0 (→ Me)", "s1 (→ gustan)"),
                             kv_labels=("h_I", "h_like", "h_cats")),
    ),    Preset(
        "padding-450", "Padding mask of [4, 5, 0]: 1-D → 2-D, 3 × 3 look-ahead, combined", "004 (masking)", "attention",
        "The notes' sequence [4, 5, 0]: token ids 4 and 5, then 0 = padding. The 1-D padding mask is [1, 1, 0]; "
        "extended to 2-D, every row allows keys 1 and 2 (and the padded query row allows nothing); the 3 × 3 "
        "look-ahead mask is lower-triangular; the combined mask is their elementwise product. The notes give no "
        "vectors here: this preset uses X = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0, 0, 0, 0]] and "
        "W = I so that the masks act on real scores.",
        (
            "1-D → 2-D: row i of the padding mask is the 1-D mask [1, 1, 0] (which keys exist), and the padded "
            "query's own row is all 0 (nothing to compute for a pad).",
            "Combined = look-ahead × padding, cell by cell: row 1 [1, 0, 0] × [1, 1, 0] = [1, 0, 0]; row 2 "
            "[1, 1, 0] × [1, 1, 0] = [1, 1, 0]; row 3 [1, 1, 1] × [0, 0, 0] = [0, 0, 0]. The notes get all three "
            "right here.",
            "A fully masked row (the pad's) gets all-zero weights, never NaN and never [1, 0, 0].",
        ),
        (),
        setup=AttentionSetup(PADDED[[0, 1, 3]], I4, I4, I4, mask="combined", padding=(True, True, False),
                             labels=("4", "5", "0 (pad)")),
    ),
    Preset(
        "cross-sketch", "Cross-attention sketch: scores [[.1, .2, .3], [.4, .5, .6]]", "003 (encoder–decoder attention, first sketch)",
        "attention",
        "The notes' first encoder–decoder sketch (before the worked 2 × 3 example) gives scores "
        "[[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]] and then weights [[0.4, 0.3, 0.3], [0.5, 0.3, 0.2]]. Its E and Q have "
        "elided columns (…), so this preset keeps only what the sketch pins down: three keys (the first three unit "
        "vectors of d_k = 4) and two queries chosen so that Q·Kᵀ is exactly the sketch's scores; V = K. Scaled "
        "by √d_k = 2 (the notes write √d_model).",
        (
            "Softmax is increasing in every score: in a row whose scores rise (0.1 < 0.2 < 0.3) the weights must "
            "rise too. The notes' weights fall ([0.4, 0.3, 0.3] and [0.5, 0.3, 0.2]): no scores could give them.",
            "Adding the same number to a whole row does not change its softmax: row 2 is row 1 + 0.3, so both "
            "rows get the same weights [0.3168, 0.3331, 0.3501] (scaled) or [0.3006, 0.3322, 0.3672] (unscaled). "
            "The notes give the two rows different weights.",
            "Small scores give nearly uniform weights: a 0.1 gap in the scores is a ratio of e^0.05 ≈ 1.05 "
            "between neighbouring weights after scaling.",
        ),
        (
            Erratum("attention weights", "[[0.4, 0.3, 0.3], [0.5, 0.3, 0.2]] (they fall as the scores rise)",
                    "softmax([0.1, 0.2, 0.3] / 2) = [0.3168, 0.3331, 0.3501] for both rows (rising with the scores; "
                    "without scaling [0.3006, 0.3322, 0.3672]). No softmax can make a larger score's weight smaller."),
            Erratum("scaling", "Scores / √d_model", "Scores / √d_k: the width of the queries and keys (d_model only "
                    "with one head)"),
        ),
        setup=AttentionSetup(np.array([[0.1, 0.2, 0.3, 0.0], [0.4, 0.5, 0.6, 0.0]]), I4, I4, I4,
                             X_kv=np.eye(4)[:3], labels=("q1", "q2"), kv_labels=("e1", "e2", "e3")),
    ),
]}


# --------------------------------------------------------------------------- worked solutions
@dataclass(frozen=True)
class Step:
    title: str
    formula: str  # LaTeX
    values: np.ndarray  # 1-D or 2-D
    rows: tuple[str, ...] = ()
    cols: tuple[str, ...] = ()
    note: str = ""
    decimals: int = 4  # on screen (masks are whole numbers: 0)


def token_names(labels, n: int, p: str) -> tuple[str, ...]:
    """Unique row/column names "i:label" (a label may repeat, e.g. two "the"); missing labels
    are p0, p1, ..."""
    labels = list(labels)[:n] + [f"{p}{i}" for i in range(len(labels), n)]
    return tuple(token_labels(labels, plain=True))


def attention_step_list(setup: AttentionSetup, head: int = 0) -> list[Step]:
    """The calculator's tables for one head, in order, each with its formula."""
    s = compute_attention(setup)
    H = setup.n_heads
    qlab = token_names(setup.labels, setup.X.shape[0], "t")
    klab = token_names(setup.kv_labels, setup.X_kv.shape[0], "s") if setup.X_kv is not None else qlab
    dims = lambda n, p: tuple(f"{p}{j}" for j in range(n))  # noqa: E731
    hs = f" (head {head})" if H > 1 else ""
    sub = "_h" if H > 1 else ""
    src = "X" if setup.X_kv is None else "E"
    steps = [
        Step("Q" + hs, rf"Q{sub} = X W_Q{sub}", s.q[head], qlab, dims(s.d_k, "q")),
        Step("K" + hs, rf"K{sub} = {src} W_K{sub}", s.k[head], klab, dims(s.d_k, "k")),
        Step("V" + hs, rf"V{sub} = {src} W_V{sub}", s.v[head], klab, dims(s.v.shape[2], "v")),
        Step("Scores QKᵀ" + hs, r"S = Q K^\top", s.scores[head], qlab, klab),
        Step("Scaled" + hs, (rf"S / \sqrt{{d_k}} = S / \sqrt{{{s.d_k}}} = S \times {s.scale:.4g}" if setup.scale
                             else r"\text{scaling off: } S \times 1"), s.scaled[head], qlab, klab),
        Step("Mask (1 = may attend, 0 = masked)", r"\text{allowed}_{ij} \in \{1, 0\}", s.mask01, qlab, klab, decimals=0),
        Step("Mask, additive form (0 / −∞)", r"M_{ij} = 0 \text{ if allowed, } -\infty \text{ otherwise}", s.additive, qlab, klab,
             decimals=0),
        Step("Masked scores" + hs, r"S / \sqrt{d_k} + M" if setup.scale else r"S + M", s.masked[head], qlab, klab),
        Step("Softmax (attention weights)" + hs, r"A_{ij} = \frac{e^{m_{ij}}}{\sum_{j'} e^{m_{ij'}}}",
             s.weights[head], qlab, klab,
             note=("Fully masked rows (nothing allowed) get all-zero weights: " +
                   ", ".join(q for q, f in zip(qlab, s.fully_masked) if f)) if s.fully_masked.any() else ""),
        Step("Output of the head Z = A V" + hs, r"Z = A V", s.heads[head], qlab, dims(s.v.shape[2], "z")),
    ]
    if H > 1 or setup.W_O is not None:
        steps.append(Step("Concat of the heads", r"Z_c = [Z_1 \,|\, \dots \,|\, Z_h]", s.concat, qlab, dims(s.concat.shape[1], "c")))
    if setup.W_O is not None:
        steps.append(Step("Output Z_c W_O", r"\text{MultiHead}(X) = Z_c W_O", s.output, qlab, dims(s.output.shape[1], "o")))
    return steps


def solve(key: str) -> list[Step]:
    """The full worked solution of a preset, every number from the engine's code."""
    p = PRESETS[key]
    if p.kind == "attention":
        extra = _ATTENTION_EXTRAS.get(key)
        return attention_step_list(p.setup) + (extra(p) if extra else [])
    if p.kind == "layernorm":
        return _layer_norm_solution(p)
    if p.kind == "pe":
        return _pe_solution(p)
    raise ValueError(f"unknown preset kind {p.kind!r}")


def _unscaled_softmax(p: Preset) -> list[Step]:
    """scaling-6-4: the same scores softmaxed without the 1/√d_k."""
    raw = compute_attention(replace(p.setup, scale=False))
    return [Step("Softmax without scaling", r"\mathrm{softmax}(S) = \mathrm{softmax}([6, 4])",
                 raw.weights[0], ("0:Q",), ("0:K1", "1:K2"), note="Compare with the scaled weights above.")]


def _notes_decoder_scores(p: Preset) -> list[Step]:
    """decoder-2x2: the softmax and the output of the notes' illustrative (not computed) scores."""
    al = causal_allowed(2).numpy()
    w = softmax_from_scores(NOTES_DECODER_SCORES, al)
    lab = ("0:Me", "1:gustan")
    return [Step("Softmax of the notes' illustrative scores", r"\mathrm{softmax}([[1.0, -\infty], [0.9, 1.1]])",
                 w, lab, lab),
            Step("Output with the notes' scores", r"A V", w @ EMB3[:2], lab, tuple(f"z{j}" for j in range(4)))]


def _context_vectors(p: Preset) -> list[Step]:
    """context-vector: c_i = Σ_j α_ij h_j term by term, and the one fixed context before attention."""
    A = compute_attention(p.setup).weights[0]  # (T_dec, T_enc)
    rows = token_names(p.setup.labels, A.shape[0], "t")
    cols = tuple(f"c{j}" for j in range(ANNOTATIONS.shape[1]))
    terms = [" + ".join(f"{A[i, j]:.4f}·{p.setup.kv_labels[j]}" for j in range(A.shape[1]))
             for i in range(A.shape[0])]
    # term by term, as by hand (the same numbers as Z = A V above: V = E W_V with W_V = I)
    ctx = np.array([sum(A[i, j] * ANNOTATIONS[j] for j in range(A.shape[1])) for i in range(A.shape[0])])
    return [Step("Context vectors c_i = Σ_j α_ij h_j", r"c_i = \sum_{j=1}^{T_x} \alpha_{ij} h_j", ctx,
                 rows, cols, note="; ".join(f"c{i + 1} = {t}" for i, t in enumerate(terms))),
            Step("Without attention: one fixed context", r"c = h_{T_x} \text{ for every } i",
                 np.repeat(ANNOTATIONS[-1:], A.shape[0], axis=0), rows, cols,
                 note="The encoder–decoder before attention passed only its last state to the decoder: "
                      "the same vector for every output word.")]


def _padding_masks(p: Preset) -> list[Step]:
    """padding-450: the notes' four masks of [4, 5, 0] in their order, from the engine's mask
    functions: the 1-D padding mask, its 2-D form, the 3 × 3 look-ahead mask, their product."""
    real = torch.tensor([bool(x) for x in p.setup.padding])  # (3,) True = real token
    T = len(real)
    lab = token_names(p.setup.labels, T, "t")
    pad2d = padding_allowed(real[None], mask_queries=True)[0, 0].numpy().astype(float)  # (T, T)
    look = causal_allowed(T).numpy().astype(float)  # (T, T)
    return [Step("1-D padding mask of [4, 5, 0]", r"[4, 5, 0] \to [1, 1, 0]", real.numpy().astype(float)[None],
                 ("keys",), lab, decimals=0),
            Step("1-D → 2-D padding mask", r"P_{ij} = p_i \, p_j", pad2d, lab, lab, decimals=0,
                 note="Each row is the 1-D mask; the padded query's row is all 0."),
            Step("Look-ahead mask (3 × 3)", r"L_{ij} = 1 \text{ if } j \le i", look, lab, lab, decimals=0),
            Step("Combined = look-ahead × padding (elementwise)", r"C = L \odot P", look * pad2d, lab, lab, decimals=0,
                 note="The same as the calculator's mask above: the engine combines them the same way.")]


def _cross_sketch_unscaled(p: Preset) -> list[Step]:
    """cross-sketch: the weights without scaling too (still rising with the scores)."""
    raw = compute_attention(replace(p.setup, scale=False))
    lab = token_names(p.setup.labels, 2, "t")
    return [Step("Softmax without scaling", r"\mathrm{softmax}(S)", raw.weights[0], lab,
                 token_names(p.setup.kv_labels, 3, "s"),
                 note="Still rising along each row, and the same for both rows: no scale makes the notes' weights.")]


# Attention presets whose solution goes on after the calculator's steps (preset key -> the extra steps).
_ATTENTION_EXTRAS = {"scaling-6-4": _unscaled_softmax, "decoder-2x2": _notes_decoder_scores,
                     "context-vector": _context_vectors, "padding-450": _padding_masks,
                     "cross-sketch": _cross_sketch_unscaled}


def _layer_norm_solution(p: Preset) -> list[Step]:
    ln = layer_norm_steps(p.vector, p.eps)
    cols = tuple(f"x{j}" for j in range(len(p.vector)))
    return [
        Step("Input x", r"x", ln.x, cols=cols),
        Step("Mean", r"\mu = \tfrac{1}{D}\sum_i x_i", np.array([ln.mean]), cols=("μ",)),
        Step("Variance (biased, divide by D)", r"\sigma^2 = \tfrac{1}{D}\sum_i (x_i-\mu)^2", np.array([ln.var]), cols=("σ²",)),
        Step(f"√(σ² + ε), ε = {ln.eps:g}", r"\sqrt{\sigma^2 + \varepsilon}", np.array([ln.std]), cols=("√(σ²+ε)",)),
        Step("Normalized", r"\hat x_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \varepsilon}}", ln.normalized, cols=cols),
        Step("Scale and shift (γ = 1, β = 0)", r"y_i = \gamma_i \hat x_i + \beta_i", ln.output, cols=cols),
    ]


def _pe_solution(p: Preset) -> list[Step]:
    pe = pe_table(p.positions, p.d_model)
    rows = tuple(f"pos {i} ({w})" for i, w in enumerate(p.words))
    cols = tuple(f"d{j}" for j in range(p.d_model))
    emb = np.array(p.embeddings)
    return [
        Step("Positional encodings", r"PE(pos,2i)=\sin\frac{pos}{10000^{2i/d}},\; PE(pos,2i+1)=\cos\frac{pos}{10000^{2i/d}}",
             pe, rows, cols),
        Step("Word embeddings", r"E", emb, rows, cols),
        Step("Embedding + PE (what the first layer sees)", r"X = E + PE", emb + pe, rows, cols),
    ]


# --------------------------------------------------------------------------- exports
def _fmt(v: float) -> str:
    if np.isneginf(v):
        return "−∞"
    if np.isposinf(v):
        return "∞"
    return f"{v:.4f}"


def steps_csv(steps: list[Step]) -> str:
    """Long format: step, row, column, value (−inf written as -inf)."""
    buf = io.StringIO()
    buf.write("step,row,column,value\n")
    for st in steps:
        v = np.atleast_2d(st.values)
        rows = st.rows or ("",) * v.shape[0]
        cols = st.cols or tuple(str(j) for j in range(v.shape[1]))
        for i in range(v.shape[0]):
            for j in range(v.shape[1]):
                x = float(v[i, j])
                val = "-inf" if np.isneginf(x) else repr(round(x, 10))
                buf.write(f"{_csv(st.title)},{_csv(rows[i])},{_csv(cols[j])},{val}\n")
    return buf.getvalue()


def _csv(s: str) -> str:
    s = str(s)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|")


def md_table(st: Step) -> str:
    v = np.atleast_2d(st.values)
    cols = st.cols or tuple(str(j) for j in range(v.shape[1]))
    head = "| " + " | ".join([""] + [_md_cell(c) for c in cols]) + " |"
    sep = "|" + "---|" * (len(cols) + 1)
    rows = st.rows or ("",) * v.shape[0]
    body = ["| " + " | ".join([_md_cell(rows[i])] + [_fmt(float(x)) for x in v[i]]) + " |" for i in range(v.shape[0])]
    return "\n".join([head, sep, *body])


def handout_markdown(title: str, description: str, steps: list[Step], hints=(), errata=()) -> str:
    """A printable handout: inputs, every step with its formula and table, hints, errata."""
    out = [f"# {title}", "", description, ""]
    for n, st in enumerate(steps, 1):
        out += [f"## {n}. {st.title}", "", f"$${st.formula}$$", "", md_table(st), ""]
        if st.note:
            out += [f"_{st.note}_", ""]
    if hints:
        out += ["## Check your arithmetic", ""] + [f"- {h}" for h in hints] + [""]
    if errata:
        out += ["## Where the lecture notes go wrong", ""]
        out += [f"- **{e.where}** — notes: {e.notes}; correct: {e.correct}" for e in errata] + [""]
    out.append("_Made with Attention Lab (every number computed by model.attention.attend / model.layers)._")
    return "\n".join(out)


def setup_inputs_steps(setup: AttentionSetup) -> list[Step]:
    """The inputs of an attention setup as steps (for the handout and CSV)."""
    qlab = token_names(setup.labels, setup.X.shape[0], "t")
    out = [Step("Input X", r"X", np.asarray(setup.X), qlab, tuple(f"x{j}" for j in range(setup.X.shape[1])))]
    if setup.X_kv is not None:
        klab = token_names(setup.kv_labels, setup.X_kv.shape[0], "s")
        out.append(Step("Keys/values input E", r"E", np.asarray(setup.X_kv), klab,
                        tuple(f"e{j}" for j in range(setup.X_kv.shape[1]))))
    for name, W in (("W_Q", setup.W_Q), ("W_K", setup.W_K), ("W_V", setup.W_V), ("W_O", setup.W_O)):
        if W is not None:
            out.append(Step(name, name, np.asarray(W)))
    return out

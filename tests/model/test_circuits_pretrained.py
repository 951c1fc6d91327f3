"""classroom/circuits.py on the real models (issue 35), against HF transformers loading the same
SmolLM2 GGUF (the references: its hidden states through its own final norm and lm_head, its
attention weights), and the character spans of the byte-level BPE and WordPiece tokenizers.
Skipped loudly without the model packages; transformers is test-only (requirements-dev.txt)."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub are imported
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from classroom.circuits import (align, char_spans, induction_test, logit_lens, ordinary_ids,  # noqa: E402
                                sink_scores)
from model.pretrained import PRETRAINED, load_pretrained  # noqa: E402

SMOL = PRETRAINED["smollm2-135m"]
MINI = PRETRAINED["minilm-l6"]
TEXT = "The capital of France is Paris, and the capital of Italy is Rome. The capital of France is"
TOL = 1e-5


@pytest.fixture(scope="module")
def smol():
    if not SMOL.installed():
        pytest.skip(f"SKIPPED LOUDLY: {SMOL.package} is not installed; run {SMOL.install}")
    return load_pretrained("smollm2-135m")


@pytest.fixture(scope="module")
def minilm():
    if not MINI.installed():
        pytest.skip(f"SKIPPED LOUDLY: {MINI.package} is not installed; run {MINI.install}")
    return load_pretrained("minilm-l6")


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers", reason="transformers (requirements-dev.txt) is needed for parity")
    pytest.importorskip("accelerate", reason="transformers needs accelerate (requirements-dev.txt) to load a GGUF")
    if not SMOL.installed():
        pytest.skip(f"SKIPPED LOUDLY: {SMOL.package} is not installed; run {SMOL.install}")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(SMOL.package_dir()), gguf_file=SMOL.weights_file, attn_implementation="eager", dtype=torch.float32,
        local_files_only=True)
    return model.eval()


def test_logit_lens_equals_transformers_hidden_states_through_its_norm_and_head(smol, hf):
    model, tok = smol
    ids = tok.encode(TEXT).ids
    x = torch.tensor([ids])
    with torch.no_grad():
        out = hf(input_ids=x, output_hidden_states=True, use_cache=False)
        # HF: hidden_states[0] = embeddings, [l] = output of block l - 1 for l < 30, [30] = after the final
        # norm; the lens row 30 is the model's output, i.e. HF's logits
        probs = [torch.softmax(hf.lm_head(hf.model.norm(h)), -1)[0] for h in out.hidden_states[:-1]]
        probs.append(torch.softmax(out.logits, -1)[0])
    tr = model.trace(x)
    lens = logit_lens(model, tr.numpy(), k=5)
    assert lens.top_ids.shape == (31, len(ids), 5)
    worst = 0.0
    for row, p in enumerate(probs):
        got = np.take_along_axis(p.numpy(), lens.top_ids[row], -1)  # HF's probability of our top tokens
        worst = max(worst, float(np.abs(got - lens.top_probs[row]).max()))
        ref_top = torch.topk(p, 5, -1).values.numpy()
        np.testing.assert_allclose(lens.top_probs[row], ref_top, atol=TOL)  # same top-5 values (ties aside)
        nxt = p[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
        np.testing.assert_allclose(lens.next_probs[row], nxt, atol=TOL)
    assert worst < TOL, worst
    # the last row is our model's own output distribution, bit for bit
    v, i = torch.topk(tr.probs[0], 5, -1)
    np.testing.assert_array_equal(lens.top_ids[-1], i.numpy())
    np.testing.assert_array_equal(lens.top_probs[-1], v.numpy())
    # only the model's output (the last row) says " Paris" after the repeated "The capital of France is"
    assert tok.decode([int(lens.top_ids[-1, -1, 0])]) == " Paris"
    assert tok.decode([int(lens.top_ids[-2, -1, 0])]) != " Paris"


def test_induction_and_sink_scores_equal_loops_over_transformers_attentions(smol, hf):
    model, tok = smol
    n = 30
    res = induction_test(model, n, seed=4, tok=tok)
    ids = res.ids
    assert ids[0] == tok.bos_id and ids[1:n + 1].tolist() == ids[n + 1:].tolist()
    assert set(ids[1:].tolist()) <= set(ordinary_ids(tok).tolist())
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([ids.tolist()]), output_attentions=True, use_cache=False)
    A = torch.stack(out.attentions)[:, 0].double().numpy()  # (L, H, T, T)
    L, H = A.shape[:2]
    ind = np.array([[np.mean([A[l, h, i, i - n + 1] for i in range(n + 1, 2 * n + 1)]) for h in range(H)] for l in range(L)])
    prev = np.array([[np.mean([A[l, h, t, t - 1] for t in range(1, 2 * n + 1)]) for h in range(H)] for l in range(L)])
    np.testing.assert_allclose(res.induction, ind, atol=TOL)
    np.testing.assert_allclose(res.previous_token, prev, atol=TOL)
    assert ind.max() > 0.5  # SmolLM2 has induction heads
    logp = torch.log_softmax(out.logits[0].double(), -1)
    loss = -logp[torch.arange(2 * n), torch.tensor(ids[1:])].numpy()
    np.testing.assert_allclose(res.loss, loss, atol=1e-4)
    assert res.second_copy_loss < 0.5 * res.first_copy_loss
    # sinks of a sentence: loops over HF's weights
    sent = tok.encode(TEXT).ids
    with torch.no_grad():
        att = torch.stack(hf(input_ids=torch.tensor([sent]), output_attentions=True, use_cache=False).attentions)
    ref = att[:, 0, :, 1:, 0].double().mean(-1).numpy()  # (L, H): queries t >= 1, key 0
    np.testing.assert_allclose(sink_scores(model.trace(torch.tensor([sent]))), ref, atol=TOL)


def test_char_spans_of_byte_level_bpe(smol):
    _, tok = smol
    text = "Crème brûlée 😀 in Zürich"
    enc = tok.encode(text)
    spans = char_spans(tok, text, enc.ids, enc.labels)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a <= b for a, b in spans) and all(s1[0] <= s2[0] for s1, s2 in zip(spans, spans[1:]))
    # an emoji cut into byte pieces: each piece spans that one character
    emoji = text.index("😀")
    parts = [s for s in spans if s[0] <= emoji < s[1]]
    assert parts and all(s[1] >= emoji + 1 for s in parts)
    # every byte-level token's text (decoded alone, when whole) sits at its span
    for tid, (a, b) in zip(enc.ids, spans):
        piece = tok.token_bytes(tid)
        try:
            assert piece.decode("utf-8") == text[a:b]
        except UnicodeDecodeError:
            assert text[a:b].strip() == "😀"


def test_char_spans_of_wordpiece_and_an_alignment_with_bpe(smol, minilm):
    _, bpe = smol
    _, wp = minilm
    text = "Unbelievable: the Walking Dead walked."
    e1, e2 = bpe.encode(text), wp.encode(text)
    s1, s2 = char_spans(bpe, text, e1.ids, e1.labels), char_spans(wp, text, e2.ids, e2.labels)
    assert s2[0] == (0, 0) and s2[-1] == (len(text), len(text))  # [CLS] and [SEP] are not in the text
    assert [text[a:b] for a, b in s2[1:-1]] == [lab.removeprefix("##") for lab in e2.labels[1:-1]]
    al = align(s1, s2)
    assert al.seg_b[0] == -1 and al.seg_b[-1] == -1
    texts = al.segment_texts(text)
    assert "".join(texts).replace(" ", "") == text.replace(" ", "")
    for t, seg in enumerate(al.seg_a):  # every BPE token lies in its segment
        if seg >= 0:
            a, b = al.segments[seg]
            assert a <= s1[t][0] and s1[t][1] <= b

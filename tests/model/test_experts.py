"""classroom/experts.py (issue 22 point 7): word location on every kind of label, and every head's
score on MiniLM against attention weights computed by HF transformers (an independent reference),
with word positions found here by hand."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from classroom import experts  # noqa: E402
from model.pretrained import PRETRAINED, load_pretrained  # noqa: E402


def test_words_are_grouped_from_wordpiece_and_bpe_labels():
    vocab = ["[CLS]", "[SEP]", "x"]
    ids = [0, 2, 2, 2, 2, 1]
    labels = ["[CLS]", "The", "suit", "##case", "it", "[SEP]"]
    assert experts.locate(labels, ids, vocab, "it", "suitcase") == (4, [2, 3], [1, 2, 3, 4])
    labels = ["The", "·suit", "case", "·is", "·big", ".", "·it"]
    assert experts.locate(labels, [2] * 7, vocab, "it", "suitcase") == (6, [1, 2], list(range(7)))
    with pytest.raises(ValueError, match="not a word"):
        experts.locate(labels, [2] * 7, vocab, "it", "trophy")
    with pytest.raises(ValueError, match="does not follow"):
        experts.locate(labels, [2] * 7, vocab, "The", "big")


def test_every_task_sentence_locates_its_words_in_the_real_tokenizers():
    for name in PRETRAINED:
        try:
            _, tok = load_pretrained(name)
        except ModuleNotFoundError as e:
            pytest.skip(str(e))
        for task, items in experts.TASKS.items():
            for sentence, query, target in items:
                enc = tok.encode(sentence)
                q, t, _ = experts.locate(enc.labels, enc.ids, tok.vocab, query, target)
                assert q > t[-1] > 0, (name, sentence)
                assert "".join(enc.labels[i] for i in t).replace("##", "").lstrip("·").lower() == target.lower()


def test_minilm_scores_equal_transformers_attention():
    transformers = pytest.importorskip("transformers")
    entry = PRETRAINED["minilm-l6"]
    try:
        model, tok = load_pretrained("minilm-l6")
    except ModuleNotFoundError as e:
        pytest.skip(str(e))
    hf = transformers.BertModel.from_pretrained(str(entry.package_dir()), attn_implementation="eager",
                                                local_files_only=True).eval()
    task = "pronoun → antecedent"
    res = experts.find_experts(model, tok, task, causal=False)
    want = []
    for sentence, query, target in experts.TASKS[task]:
        ids = tok.encode(sentence).ids
        words = [tok.vocab[i] for i in ids]
        t = words.index(target.lower())  # single word pieces in MiniLM's vocabulary
        q = words.index(query.lower(), t + 1)
        with torch.no_grad():
            att = hf(torch.tensor([ids]), output_attentions=True).attentions  # L × (1, H, T, T)
        want.append(np.stack([a[0, :, q, t].numpy() for a in att]))  # (L, H)
    np.testing.assert_allclose(res.per_sentence, np.stack(want), atol=1e-5)
    np.testing.assert_allclose(res.score, np.mean(want, axis=0), atol=1e-5)
    best = res.top(1)[0]
    assert best.score > 2 * res.baseline  # a real expert: well above an even spread
    assert best.previous == res.previous[best.layer, best.head] < 0.2  # and not a previous-token head
    assert best.score == res.score.max() and best.hit_rate == res.hits[best.layer, best.head]
    assert best.far == res.far[best.layer, best.head]
    rows = res.sentence_weights(best.layer, best.head)
    assert [(r.sentence, r.query, r.target) for r in rows] == experts.TASKS[task]
    np.testing.assert_allclose([r.weight for r in rows], np.stack(want)[:, best.layer, best.head], atol=1e-5)
    assert [r.tokens_back for r in rows] == res.distances

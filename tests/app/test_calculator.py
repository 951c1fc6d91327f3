"""AppTest: the calculator page reproduces the presets, reacts to an edited cell, rejects bad input
with a message (keeping what was typed) and offers only valid head counts."""
import numpy as np
import pytest

from tests.app.test_concept_pages import fig
from tests.helpers import decode, errors, open_page

PAGE = "pages/calculator.py"


def open_calc(**query):
    return open_page(PAGE, **query)


def tables(at):
    return [d.value for d in at.dataframe]


def find_table(at, first_row):
    """The first table whose first row reads first_row (as shown, 4 decimals)."""
    want = [f"{x:.4f}" for x in first_row]
    for df in tables(at):
        if list(df.shape) and df.shape[1] == len(want) and list(df.iloc[0].astype(str)) == want:
            return df
    return None


def shown(df) -> np.ndarray:
    return np.array([[float(x.replace("−∞", "-inf")) for x in row] for row in df.astype(str).values])


def edit(at, name, row, col, text):
    ver = at.session_state["_calc_ver"]
    at.session_state[f"calc_ed_{name}_{ver}"] = {"edited_rows": {row: {col: text}}, "added_rows": [],
                                                 "deleted_rows": []}
    at.run()


@pytest.fixture(scope="module")
def calc():
    return open_calc()


def test_default_preset_the_cat_sat(calc):
    at = calc
    w = find_table(at, [0.4223, 0.1554, 0.4223])
    assert w is not None, "softmax table of The/CAT/SAT missing"
    np.testing.assert_allclose(shown(w)[2], [0.2119, 0.2119, 0.5761], atol=1e-4)
    out = find_table(at, [0.8446, 0.5777, 0.8446, 0.5777])
    assert out is not None, "output row of The must be [0.8446, 0.5777, ...] (not the notes' 1.2669)"
    body = " ".join(m.value for m in at.markdown) + " ".join(w.value for w in at.warning)
    assert "Check your arithmetic" in body and "1.2669" in body
    assert at.selectbox(key="preset").value == "the-cat-sat"


def test_edit_a_cell_changes_outputs():
    at = open_calc()
    assert find_table(at, [2, 0, 2]) is not None  # scores row of The
    edit(at, "X", 0, "x1", "2")  # The = [1, 2, 1, 0]
    assert not errors(at)
    scores = find_table(at, [6, 2, 4])  # row The of QKᵀ with The = [1, 2, 1, 0]
    assert scores is not None, [df.iloc[0].tolist() for df in tables(at)]
    X = np.array([[1, 2, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], float)
    np.testing.assert_allclose(shown(scores), X @ X.T, atol=1e-4)
    assert any("changed the example" in c.value for c in at.caption)
    assert find_table(at, [0.4223, 0.1554, 0.4223]) is None  # the old weights are gone


@pytest.mark.parametrize("typed, message", [("abc", "is not a number"), ("", "is empty"),
                                            ("nan", "not a finite number"), ("inf", "not a finite number")])
def test_bad_cell_gives_message_and_keeps_text(typed, message):
    at = open_calc()
    edit(at, "W_Q", 1, "q2", typed)
    assert not errors(at)
    msgs = " ".join(e.value for e in at.error)
    assert message in msgs and "W" in msgs, msgs
    assert at.session_state["_calc_cur"]["W_Q"].iat[1, 2] == typed  # what the user typed stays
    for df in tables(at):  # no NaN on screen
        assert not any(str(x).lower() == "nan" for x in df.values.ravel())


@pytest.mark.parametrize("preset, first_row", [
    ("enc-dec-2x3", [0.60, 1.40, 2.20]),  # scores (2 x 3)
    ("decoder-2x2", [0.1, 0.2, 0.3, 0.4]),
    ("scaling-6-4", [0.7311, 0.2689]),
    ("layernorm-2468", [-1.3416, -0.4472, 0.4472, 1.3416]),
    ("context-vector", [0.7870, 0.1065, 0.1065, 1.0]),  # c_1 (the head's output and the context table)
])
def test_switch_presets(calc, preset, first_row):
    at = calc
    at.selectbox(key="preset").set_value(preset).run()
    assert not errors(at)
    assert find_table(at, first_row) is not None, (preset, [df.iloc[0].tolist() for df in tables(at)][:20])
    assert at.query_params.get("preset") in (preset, [preset])


def test_padded_batch_preset_masks_row_four():
    at = open_calc(preset="padded-batch")
    cands = [shown(df) for df in tables(at) if df.shape == (4, 4) and "0.3729" in df.values.ravel().tolist()]
    assert cands, "softmax table of the padded batch missing"
    got = cands[0]
    np.testing.assert_allclose(got[0], [1, 0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(got[1], [0.3729, 0.6271, 0, 0], atol=1e-4)
    np.testing.assert_allclose(got[3], [0, 0, 0, 0], atol=1e-9)
    add = [df for df in tables(at) if "−∞" in df.values.ravel().tolist()]
    assert add, "the additive mask must show −∞"
    assert any("Fully masked rows" in c.value for c in at.caption)


def test_pe_preset_and_heads_options():
    at = open_calc(preset="pe-d4")
    rows = [list(df.iloc[1]) for df in tables(at) if df.shape == (3, 4)]
    assert ["1.3415", "1.1403", "0.7100", "1.8000"] in rows, rows  # CAT + PE (the notes: 1.34, 0.94, 0.01, 1.79)
    assert ["0.8415", "0.5403", "0.0100", "1.0000"] in rows, rows  # PE(1) in float64: cos(0.01) = 0.99995
    # the PE(pos, i) side calculator's table: position 2 (the notes' cosine exponents would give other values)
    pe_side = [df for df in tables(at) if list(df.index) == ["pos 0", "pos 1", "pos 2"]]
    assert any(list(df.loc["pos 2"]) == ["0.9093", "-0.4161", "0.0200", "0.9998"] for df in pe_side), pe_side
    at.number_input(key="calc_d").set_value(6).run()
    assert not errors(at)
    assert at.selectbox(key="calc_heads").options == ["1", "2", "3", "6"]
    at.selectbox(key="calc_heads").set_value(3).run()
    assert not errors(at)
    assert at.radio(key="calc_show_head").options == ["0", "1", "2"]  # exactly 3 heads, not "more than 1"
    at.radio(key="calc_show_head").set_value(2).run()
    assert not errors(at)
    steps = [m.value for m in at.markdown if m.value.startswith("**1. Q")]
    assert steps == ["**1. Q (head 2)**"], steps


def test_small_calculators_bad_input():
    at = open_calc()
    at.text_input(key="calc_sm_x").input("6, 4").run()
    at.number_input(key="calc_sm_t").set_value(2.0).run()
    sm = [df for df in tables(at) if df.shape == (3, 2) and list(df.iloc[0]) == ["6.000", "4.000"]]
    assert sm and list(sm[0].iloc[1]) == ["3.000", "2.000"] and list(sm[0].iloc[2]) == ["0.731", "0.269"]
    at.text_input(key="calc_ln_x").input("1, two, 3").run()
    assert not errors(at)
    assert any("“two” is not a number" in e.value for e in at.error)
    at.text_input(key="calc_ln_eps").input("0").run()
    assert any("ε must be > 0" in e.value for e in at.error)
    at.text_input(key="calc_sm_x").input("1e308, 1").run()
    at.number_input(key="calc_sm_t").set_value(0.01).run()
    assert not errors(at)
    assert any("too large" in e.value for e in at.error)
    at.text_input(key="calc_ln_eps").input("1e-5").run()
    at.text_input(key="calc_ln_x").input("1e308, -1e308, 3").run()
    assert not errors(at)
    assert any("variance overflows" in e.value for e in at.error)
    for df in tables(at):  # no NaN on screen
        assert not any(str(x).lower() in ("nan", "inf") for x in df.values.ravel())


def test_calculator_accepts_v_narrower_than_k():
    from classroom import worked_examples as wx
    from tests.app.test_calculator import open_calc, shown, tables
    at = open_calc()
    at.number_input(key="calc_dv").set_value(2).run()
    assert not errors(at), errors(at)
    X = wx.PRESETS["the-cat-sat"].setup.X
    S = X @ X.T / np.sqrt(X.shape[1])  # W_Q = W_K = I (d_k = 4); W_V = the first 2 columns of I
    A = np.exp(S - S.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    Z = A @ X[:, :2]
    zs = [shown(df) for df in tables(at) if df.shape == (3, 2)]
    assert any(np.allclose(z, Z, atol=5e-4) for z in zs), zs
    assert any(df.shape == (3, 4) and list(df.columns) == ["k0", "k1", "k2", "k3"] for df in tables(at))


def test_search_engine_analogy_equals_numpy_attention():
    from classroom import search as se
    from tests.app.test_calculator import open_calc, tables
    at = open_calc()
    at.slider(key="search_food").set_value(2.0).run()
    at.slider(key="search_animals").set_value(1.0).run()
    assert not errors(at), errors(at)
    lib = se.LIBRARY
    q = np.array([1.0, 2.0, 0.0])
    s = lib.keys @ q  # independent: numpy softmax(q Kᵀ / √d_k) V
    z = s / np.sqrt(3)
    w = np.exp(z - z.max())
    w /= w.sum()
    table = [df for df in tables(at) if df.index.name == "document"][0]
    np.testing.assert_allclose(table["score q·k"].astype(float), s, atol=5e-5)
    np.testing.assert_allclose(table["weight (softmax)"].astype(float), w, atol=5e-5)
    out = w @ lib.values
    text = " ".join(m.value for m in at.markdown)
    assert f"stars {out[0]:.4f}, minutes {out[1]:.4f}" in text, text
    bars = decode(fig(at, "The blend")["data"][0]["y"])
    np.testing.assert_allclose(bars, w, atol=1e-12)
    at.toggle(key="search_scale").set_value(False).run()
    w2 = np.exp(s - s.max())
    w2 /= w2.sum()
    table = [df for df in tables(at) if df.index.name == "document"][0]
    np.testing.assert_allclose(table["weight (softmax)"].astype(float), w2, atol=5e-5)


def test_padding_450_preset_shows_the_notes_four_masks():
    """Issue 34: seed 004's [4, 5, 0] example (1-D mask, 2-D mask, 3 × 3 look-ahead, combined) as a
    preset, each mask from the engine's mask functions."""
    at = open_calc(preset="padding-450")
    assert not errors(at)
    def numeric(df):
        try:
            return shown(df)
        except ValueError:
            return None

    assert any(df.shape == (1, 3) and np.array_equal(numeric(df), [[1, 1, 0]]) for df in tables(at))  # 1-D
    threes = [t for t in (numeric(df) for df in tables(at) if df.shape == (3, 3)) if t is not None]
    want = {"pad2d": [[1, 1, 0], [1, 1, 0], [0, 0, 0]], "look": [[1, 0, 0], [1, 1, 0], [1, 1, 1]],
            "combined": [[1, 0, 0], [1, 1, 0], [0, 0, 0]]}
    for name, m in want.items():
        assert any(t.shape == (3, 3) and np.array_equal(t, np.array(m, float)) for t in threes), (name, threes)
    softmax = [t for t in threes if np.allclose(t[1], [0.3729, 0.6271, 0], atol=1e-4)]
    assert softmax and np.array_equal(softmax[0][2], [0, 0, 0])  # the pad's row: all zero, never NaN


def test_cross_sketch_preset_flags_the_impossible_weights():
    """Issue 34: seed 003's first cross-attention sketch (scores [[.1, .2, .3], [.4, .5, .6]], weights
    [[.4, .3, .3], [.5, .3, .2]]) as a preset: the computed weights rise with the scores and are the
    same for both rows; the page says the notes' weights are impossible for a softmax."""
    at = open_calc(preset="cross-sketch")
    assert not errors(at)
    assert find_table(at, [0.1, 0.2, 0.3]) is not None  # the sketch's scores, exactly
    w = [shown(df) for df in tables(at) if df.shape == (2, 3) and np.allclose(shown(df)[0], [0.3168, 0.3331, 0.3501], atol=1e-4)]
    assert w and np.allclose(w[0][1], w[0][0])  # row 2 = row 1 + 0.3: the same softmax
    assert np.all(np.diff(w[0], axis=1) > 0)  # rising with the scores
    from tests.helpers import all_text
    text = all_text(at) + " ".join(str(e.proto) for e in at.get("expandable"))
    assert "[0.4, 0.3, 0.3]" in text and "No softmax can make a larger score's weight smaller" in text


def test_enc_dec_hint_says_row_two_is_not_halved():
    """Issue 34: the hint "the notes' 0.3 is already halved, then halved again" held for row 1 only."""
    from classroom import worked_examples as wx
    hints = " ".join(wx.PRESETS["enc-dec-2x3"].hints)
    assert "first row [0.3, 0.7, 1.1] is already halved" in hints and "Row 2 is not a halving slip" in hints
    s = wx.compute_attention(wx.PRESETS["enc-dec-2x3"].setup).scores[0]
    np.testing.assert_allclose(s[0] / 2, [0.3, 0.7, 1.1], atol=1e-12)  # row 1: the notes' numbers are half
    assert not np.allclose(s[1] / 2, [0.26, 0.62, 0.98], atol=5e-3)  # row 2: not
    np.testing.assert_allclose(s[1] / 2, [0.25, 0.57, 0.89], atol=1e-12)

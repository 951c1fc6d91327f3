"""A small generated English corpus with structure attention can learn (fixed seed, no downloads).

Sentence families (lower-case words, punctuation as separate tokens):
  - "the cat sat on the mat":      the [adj] ANIMAL VERB PREP the THING .
  - subject-verb agreement across a prepositional phrase:
        the keys to the cabinet are on the table .   /   the key to the cabinets is broken .
    The attractor noun's number is independent of the subject's, so "agree with the nearest noun"
    is right only half the time; the model has to look back past the phrase to the subject.
  - pronouns referring back:       mary lost her keys , so she looked for them .
  - repeated names (previous-token and induction-style heads):
        mary gave john the book , and john thanked mary .   /   ... john smith ... john smith .
  - polysemy in distinct contexts: "i ate an apple for lunch ." vs "apple released a new phone ."
    and "the bank of the river" vs "deposited money at the bank".

Held-out split: whole (subject noun, attractor noun) pairs of the agreement family are held out,
so agreement is measured on combinations never seen in training; every other held-out sentence is
a string that never occurs in the training split. `agreement_items()` gives the held-out test
items (prefix, correct verb, wrong verb).
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from model.tokenizer import SPECIALS, Tokenizer

MASK = "<mask>"
SEED = 1234
DEFAULT_SENTENCE = "the keys to the cabinet are on the table ."
# The contextual-embeddings page's default pair: the same word in two senses.
POLYSEMY_PAIRS = (
    ("I ate an apple for lunch .", "Apple released a new phone .", "apple"),
    ("we sat on the bank of the river .", "she deposited money at the bank .", "bank"),
)

# --- word lists -----------------------------------------------------------------------------
AGR_NOUNS = [  # (singular, plural)
    ("key", "keys"), ("cabinet", "cabinets"), ("book", "books"), ("box", "boxes"),
    ("door", "doors"), ("car", "cars"), ("chair", "chairs"), ("picture", "pictures"),
    ("letter", "letters"), ("window", "windows"), ("bottle", "bottles"), ("cup", "cups"),
    ("lamp", "lamps"), ("bag", "bags"), ("coin", "coins"), ("shelf", "shelves"),
    ("child", "children"), ("man", "men"), ("woman", "women"), ("teacher", "teachers"),
    ("doctor", "doctors"), ("student", "students"), ("farmer", "farmers"), ("painter", "painters"),
    ("friend", "friends"), ("garden", "gardens"), ("house", "houses"), ("road", "roads"),
]
AGR_PREPS = ["to", "near", "behind", "of", "by", "under", "beside", "with"]
AGR_VERBS = [("is", "are"), ("was", "were")]
AGR_PREDICATES = ["on the table", "in the kitchen", "very old", "broken", "new", "here", "on the shelf",
                  "in the box", "quite small", "too big", "clean", "dirty", "near the door", "gone",
                  "ready", "in the garden", "very quiet", "still there"]
SUBJ_ADJ = ["old", "new", "small", "big", "red", "blue", "green", "heavy"]

ANIMALS = ["cat", "dog", "bird", "mouse", "fox", "horse", "cow", "duck", "frog", "rabbit", "goat",
           "owl", "pig", "lion", "bear"]
ANIMAL_ADJ = ["big", "small", "black", "white", "old", "young", "happy", "lazy", "brown", "little",
              "fat", "sleepy"]
ANIMAL_VERBS = ["sat", "slept", "lay", "stood", "jumped", "ran", "waited", "played"]
PLACE_PREPS = ["on", "under", "near", "beside", "behind"]
THINGS = ["mat", "rug", "bed", "chair", "sofa", "floor", "table", "box", "roof", "wall", "grass",
          "log", "fence", "hill", "tree"]

FEMALE = ["mary", "anna", "sarah", "emma", "lucy", "kate", "julia", "alice", "laura", "nina", "rose",
          "helen"]
MALE = ["john", "tom", "peter", "david", "james", "paul", "mark", "sam", "ben", "jack", "george",
        "henry"]
SURNAMES = ["smith", "jones", "miller", "davis", "wilson", "taylor", "clark", "walker", "hall",
            "wright", "lopez", "baker", "carter", "evans", "turner", "moore"]
OBJECTS = ["book", "key", "ball", "letter", "pen", "hat", "map", "ticket", "cake", "photo", "ring",
           "gift"]
PLACES = ["park", "station", "library", "market", "school", "office", "cafe", "museum", "beach",
          "hospital"]
TOWNS = ["london", "paris", "boston", "madrid", "rome", "berlin", "dublin", "oslo"]
FEELINGS = ["tired", "happy", "hungry", "late", "sick", "busy", "angry", "lost"]
PEOPLE_SG = [("boy", "he"), ("girl", "she"), ("man", "he"), ("woman", "she"), ("king", "he"),
             ("queen", "she")]
PEOPLE_PL = ["boys", "girls", "students", "teachers", "farmers", "children", "doctors"]

FRUITS = ["apple", "orange", "banana", "pear", "peach", "egg", "sandwich", "salad"]
FRUIT_ADJ = ["red", "green", "sweet", "fresh", "big", "ripe"]
MEALS = ["lunch", "breakfast", "dinner"]
COMPANIES = ["apple", "google", "samsung", "sony", "nokia", "intel", "amazon"]
PRODUCTS = ["phone", "laptop", "computer", "tablet", "watch", "camera", "chip", "speaker"]
LAUNCH = ["released", "announced", "launched", "unveiled", "sold"]
SUBJECTS = ["i", "we", "they", "he", "she"]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


# --- the families -------------------------------------------------------------------------
def _cat(r: random.Random) -> str:
    adj = r.choice(ANIMAL_ADJ) + " " if r.random() < 0.4 else ""
    return f"the {adj}{r.choice(ANIMALS)} {r.choice(ANIMAL_VERBS)} {r.choice(PLACE_PREPS)} the {r.choice(THINGS)} ."


def _agreement_parts(r: random.Random):
    """(sentence, prefix, correct, wrong, (subject noun index, attractor noun index))."""
    si = r.randrange(len(AGR_NOUNS))
    ai = r.choice([i for i in range(len(AGR_NOUNS)) if i != si])
    s_pl, a_pl = r.random() < 0.5, r.random() < 0.5
    subj = AGR_NOUNS[si][int(s_pl)]
    attr = AGR_NOUNS[ai][int(a_pl)]
    adj = r.choice(SUBJ_ADJ) + " " if r.random() < 0.3 else ""
    sg, pl = r.choice(AGR_VERBS)
    good, bad = (pl, sg) if s_pl else (sg, pl)
    prefix = f"the {adj}{subj} {r.choice(AGR_PREPS)} the {attr}"
    return f"{prefix} {good} {r.choice(AGR_PREDICATES)} .", prefix, good, bad, (si, ai)


def _pronoun(r: random.Random) -> str:
    k = r.randrange(4)
    if k == 0:
        female = r.random() < 0.5
        name = r.choice(FEMALE if female else MALE)
        his, he = ("her", "she") if female else ("his", "he")
        obj = r.choice(OBJECTS)
        return f"{name} lost {his} {obj} , so {he} looked for it ."
    if k == 1:
        noun, he = r.choice(PEOPLE_SG)
        return f"the {noun} said that {he} was {r.choice(FEELINGS)} ."
    if k == 2:
        return f"the {r.choice(PEOPLE_PL)} said that they were {r.choice(FEELINGS)} ."
    female = r.random() < 0.5
    a = r.choice(FEMALE if female else MALE)
    b = r.choice(MALE if female else FEMALE)  # other gender: the pronoun is unambiguous
    he = "she" if female else "he"
    return f"{a} called {b} because {he} was {r.choice(FEELINGS)} ."


def _names(r: random.Random) -> str:
    a, b, c = r.sample(FEMALE + MALE, 3)
    la, lb = r.sample(SURNAMES, 2)
    k = r.randrange(6)
    if k == 0:
        return f"{a} gave {b} the {r.choice(OBJECTS)} , and {b} thanked {a} ."
    if k == 1:
        return f"{a} met {b} at the {r.choice(PLACES)} . later {a} called {b} again ."
    if k == 2:
        return f"{a} {la} lives in {r.choice(TOWNS)} . everyone knows {a} {la} ."
    if k == 3:
        return f"{a} {la} and {b} {lb} went to the {r.choice(PLACES)} . {b} {lb} left first ."
    if k == 4:  # a repeated list: copying it needs previous-token + induction heads
        return f"{a} , {b} and {c} came to the {r.choice(PLACES)} . later {a} , {b} and {c} went home ."
    return f"{a} {la} wrote to {b} {lb} , and {b} {lb} wrote back to {a} {la} ."


COPY_WORDS = sorted(set(ANIMALS + THINGS + OBJECTS + PLACES + FRUITS[:5] + FEMALE + MALE + TOWNS))


def _copy(r: random.Random) -> str:
    """A random word list said twice: predicting the repeat needs previous-token + induction heads."""
    words = " ".join(r.sample(COPY_WORDS, r.randint(3, 6)))
    return f"{words} , i repeat , {words} ."


def _polysemy(r: random.Random) -> str:
    k = r.randrange(8)
    subj = r.choice(SUBJECTS + FEMALE[:4] + MALE[:4])
    if k == 0:
        food = r.choice(FRUITS)
        adj = r.choice(FRUIT_ADJ) if r.random() < 0.4 else ""
        art = _article(adj or food)
        return f"{subj} ate {art} {adj + ' ' if adj else ''}{food} for {r.choice(MEALS)} ."
    if k == 1:
        return f"the {r.choice(['apple', 'pear', 'peach', 'orange'])} on the tree was {r.choice(FRUIT_ADJ)} ."
    if k in (2, 3):
        return f"{r.choice(COMPANIES)} {r.choice(LAUNCH)} a new {r.choice(PRODUCTS)} ."
    if k == 4:
        return f"shares of {r.choice(COMPANIES)} rose after the new {r.choice(PRODUCTS)} ."
    if k == 5:
        return f"{subj} {r.choice(['sat', 'walked', 'fished', 'rested'])} on the bank of the {r.choice(['river', 'stream', 'lake'])} ."
    if k == 6:
        return f"{subj} deposited money at the bank ."
    return f"the bank {r.choice(['approved', 'refused', 'offered'])} the {r.choice(['loan', 'account', 'mortgage'])} ."


FAMILIES = (("cat", _cat, 0.12), ("agreement", None, 0.28), ("pronoun", _pronoun, 0.10),
            ("names", _names, 0.18), ("polysemy", _polysemy, 0.14), ("copy", _copy, 0.18))


@dataclass(frozen=True)
class AgreementItem:
    prefix: str  # "the keys to the cabinet"
    correct: str  # "are"
    wrong: str  # "is"
    sentence: str = ""  # one full held-out sentence with this prefix (for the masked-LM test)


@dataclass(frozen=True)
class Corpus:
    train: list[str]
    heldout: list[str]
    agreement: list[AgreementItem]  # held-out agreement items (subject/attractor pairs unseen)


@functools.lru_cache(maxsize=4)
def generate(n: int = 30000, seed: int = SEED, heldout_frac: float = 0.1) -> Corpus:
    """Deterministic corpus: n sampled sentences (with repeats), split into train / held-out.

    Held-out sentences never occur in train. Agreement sentences whose (subject noun, attractor
    noun) pair is in the held-out pair set go to held-out only; DEFAULT_SENTENCE's pair stays in
    train so the app's default sentence is in-distribution."""
    r = random.Random(seed)
    pairs = [(i, j) for i in range(len(AGR_NOUNS)) for j in range(len(AGR_NOUNS)) if i != j]
    key_cab = (0, 1)
    held_pairs = set(r.sample([p for p in pairs if p != key_cab], int(0.15 * len(pairs))))
    names, weights = [f[0] for f in FAMILIES], [f[2] for f in FAMILIES]
    fns = {f[0]: f[1] for f in FAMILIES}
    other: list[str] = []
    held_agr: dict[str, AgreementItem] = {}
    held_agr_sent: list[str] = []
    for _ in range(n):
        fam = r.choices(names, weights)[0]
        if fam == "agreement":
            sent, prefix, good, bad, pair = _agreement_parts(r)
            if pair in held_pairs:
                held_agr_sent.append(sent)
                held_agr.setdefault(f"{prefix}|{good}", AgreementItem(prefix, good, bad, sent))
                continue
        else:
            sent = fns[fam](r)
        other.append(sent)
    other.append(DEFAULT_SENTENCE)
    other.extend(s.lower() for pair in POLYSEMY_PAIRS for s in pair[:2])
    # split the remaining distinct sentences by string: held-out strings never occur in train
    distinct = sorted(set(other))
    r.shuffle(distinct)
    protected = {DEFAULT_SENTENCE} | {s.lower() for pair in POLYSEMY_PAIRS for s in pair[:2]}
    n_held = int(heldout_frac * len(distinct))
    held = set([s for s in distinct if s not in protected][:n_held])
    train = [s for s in other if s not in held]  # keeps repeats: frequent sentences stay frequent
    heldout = sorted(held) + sorted(set(held_agr_sent))
    r.shuffle(heldout)
    return Corpus(train=train, heldout=heldout, agreement=sorted(held_agr.values(), key=lambda a: (a.prefix, a.correct)))


def all_words() -> list[str]:
    """Every word any template can produce (so the vocabulary has no held-out <unk>)."""
    words: set[str] = set()
    lists = [["came to home later went wrote back everyone knows lives first left repeat"], AGR_PREPS, AGR_PREDICATES, SUBJ_ADJ, ANIMALS, ANIMAL_ADJ, ANIMAL_VERBS, PLACE_PREPS,
             THINGS, FEMALE, MALE, SURNAMES, OBJECTS, PLACES, TOWNS, FEELINGS, PEOPLE_PL, FRUITS,
             FRUIT_ADJ, MEALS, COMPANIES, PRODUCTS, LAUNCH, SUBJECTS]
    for lst in lists:
        for item in lst:
            words.update(Tokenizer.split(item))
    for pair in AGR_NOUNS + AGR_VERBS + PEOPLE_SG:
        words.update(pair)
    return sorted(words)


@functools.lru_cache(maxsize=4)
def build_tokenizer(mask: bool = False, add_bos: bool = True) -> Tokenizer:
    """Word-level vocabulary of the whole corpus (most frequent first) with <bos> prepended.

    mask=True inserts "<mask>" right after the special tokens (for the masked-LM preset)."""
    c = generate()
    tok = Tokenizer.build(c.train + c.heldout + [" ".join(all_words())]
                          + [s for pair in POLYSEMY_PAIRS for s in pair[:2]],
                          level="word", add_bos=add_bos)
    if mask:
        vocab = tok.vocab[: len(SPECIALS)] + [MASK] + tok.vocab[len(SPECIALS):]
        tok = Tokenizer(vocab, level="word", add_bos=add_bos)
    return tok


CHAIN_SEED = 4321


@functools.lru_cache(maxsize=4)
def chain_successor(alphabet_size: int = 40, seed: int = CHAIN_SEED) -> dict[str, str]:
    """A fixed successor map over `alphabet_size` words of COPY_WORDS: one cycle through them in a
    seeded random order (no word is its own successor)."""
    if not 2 <= alphabet_size <= len(COPY_WORDS):
        raise ValueError(f"alphabet_size must be in 2..{len(COPY_WORDS)}, got {alphabet_size}")
    alpha = random.Random(seed).sample(COPY_WORDS, alphabet_size)
    return {w: alpha[(i + 1) % alphabet_size] for i, w in enumerate(alpha)}


def chain_sequences(n: int, seed: int = CHAIN_SEED, alphabet_size: int = 40,
                    min_len: int = 8, max_len: int = 16) -> list[str]:
    """Synthetic training sequences that can only be predicted with a previous-token head.

    Two word chains interleaved: w[t+1] = successor(w[t-1]) for a fixed successor map, so the next
    word depends on the word BEFORE the current one and not at all on the current one (the other
    chain). Attending to the previous position and reading its word is the only way to predict it.
    Only the causal presets' training mix uses these (a curriculum prelude plus a share of the
    batches, training.train); the held-out split and every evaluation set stay natural sentences."""
    succ = chain_successor(alphabet_size, seed)
    words = sorted(succ)
    r = random.Random(seed + n)
    out = []
    for _ in range(n):
        k = r.randint(min_len, max_len)
        s = r.choices(words, k=2)
        while len(s) < k:
            s.append(succ[s[-2]])
        out.append(" ".join(s) + " .")
    return out


def agreement_items() -> list[AgreementItem]:
    """Held-out agreement test items (their subject/attractor noun pairs never occur in train)."""
    return generate().agreement

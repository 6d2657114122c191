"""Text data sources of the multi-label text workload (seed report 000): the proposals
generator with exact ground truth, GoEmotions, CSV/TSV tables and the train/dev splits."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from trainbench.workloads.textdata.dataset import TextDataset
from trainbench.workloads.textdata.files import load_goemotions, load_table
from trainbench.workloads.textdata.proposal_check import check_proposal
from trainbench.workloads.textdata.proposal_vocabulary import (
    BANNED_PHRASES,
    FIRST_NAMES,
    SURNAME_TYPOS,
)
from trainbench.workloads.textdata.proposals import PROPOSAL_LABELS, generate_proposals
from trainbench.workloads.textdata.splits import load_splits

GOEMOTIONS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "goemotions"
needs_goemotions = pytest.mark.skipif(
    not GOEMOTIONS.is_dir(), reason=f"GoEmotions is absent ({GOEMOTIONS} not found)"
)
KEY = "workloads.text_multilabel.data"


def checked(dataset: TextDataset) -> np.ndarray:
    """check_proposal over every document, as a label matrix in PROPOSAL_LABELS order."""
    rows = []
    for text in dataset.texts:
        found = check_proposal(text)
        assert set(found) == set(PROPOSAL_LABELS)
        rows.append([found[label] for label in PROPOSAL_LABELS])
    return np.array(rows, dtype=np.uint8)


def words(dataset: TextDataset) -> np.ndarray:
    return np.array([len(text.split()) for text in dataset.texts])


# ----------------------------------------------------------------------------- proposals


@pytest.mark.parametrize("label", PROPOSAL_LABELS)
def test_each_label_alone_is_injected_exactly(label):
    freqs = {name: float(name == label) for name in PROPOSAL_LABELS}
    data = generate_proposals(200, seed=11, label_frequencies=freqs)
    expected = np.zeros((200, 4), dtype=np.uint8)
    expected[:, PROPOSAL_LABELS.index(label)] = 1
    assert data.labels.dtype == np.uint8 and data.label_names == list(PROPOSAL_LABELS)
    assert np.array_equal(data.labels, expected)
    assert np.array_equal(checked(data), expected)


def test_zero_frequencies_give_clean_documents():
    data = generate_proposals(200, seed=12, label_frequencies=dict.fromkeys(PROPOSAL_LABELS, 0.0))
    assert data.labels.sum() == 0
    assert checked(data).sum() == 0
    lowered = " ".join(data.texts).lower()
    assert not [phrase for phrase in BANNED_PHRASES if phrase in lowered]


@pytest.fixture(scope="module")
def mixed() -> TextDataset:
    return generate_proposals(2000, seed=7, label_frequencies=dict.fromkeys(PROPOSAL_LABELS, 0.3))


def test_mixed_labels_equal_the_independent_checker(mixed):
    assert len(mixed) == 2000 and mixed.labels.shape == (2000, 4)
    assert np.array_equal(mixed.labels, checked(mixed))


def test_observed_frequencies_follow_the_request(mixed):
    observed = mixed.labels.mean(axis=0)
    assert np.all(np.abs(observed - 0.3) <= 0.05), observed
    other = generate_proposals(
        2000, seed=8, label_frequencies={"banned_phrases": 0.1, "crosswalk_error": 0.6}
    )
    # labels left out of the dict default to 0.3
    assert np.allclose(other.labels.mean(axis=0), [0.6, 0.1, 0.3, 0.3], atol=0.05)


def test_generator_is_deterministic_and_seeded(mixed):
    freqs = dict.fromkeys(PROPOSAL_LABELS, 0.3)
    again = generate_proposals(2000, seed=7, label_frequencies=freqs)
    assert again.texts == mixed.texts and np.array_equal(again.labels, mixed.labels)
    other = generate_proposals(2000, seed=70, label_frequencies=freqs)
    assert other.texts != mixed.texts and not np.array_equal(other.labels, mixed.labels)
    assert len(set(mixed.texts)) == len(mixed)  # no duplicate documents


def test_labels_are_independent_columns(mixed):
    columns = {tuple(mixed.labels[:, j]) for j in range(4)}
    assert len(columns) == 4
    corr = np.corrcoef(mixed.labels.T.astype(float))
    assert np.abs(corr[~np.eye(4, dtype=bool)]).max() < 0.1


def test_document_lengths_are_in_range_and_do_not_reveal_labels(mixed):
    n_words = words(mixed)
    assert 80 <= n_words.mean() <= 200
    assert n_words.min() >= 60 and n_words.max() <= 240
    for j, label in enumerate(PROPOSAL_LABELS):
        pos, neg = n_words[mixed.labels[:, j] == 1].mean(), n_words[mixed.labels[:, j] == 0].mean()
        assert abs(pos - neg) / neg < 0.15, (label, pos, neg)


def test_documents_have_the_required_parts(mixed):
    for text in mixed.texts[:300]:
        assert text.startswith(("Title:", "Project Title:"))
        people = re.findall(r"(?:Dr\.|Professor) [A-Z]\w+ [A-Z]\w+", text)
        assert len(people) >= 2
        listed = re.findall(r"^Objective (\d+):", text, re.MULTILINE)
        assert listed == ["1", "2", "3"]
        assert re.search(r"Objective \d+ [a-z ]+ Standard [A-Z]\b|Standard [A-Z] is met", text)
        assert len(re.findall(r"\b\d{4}\b", text)) >= 4  # two phases, a start and an end each
        assert not re.search(r"\b(error|inconsisten\w*|mismatch\w*|wrong)\b", text, re.I)


def test_dates_have_no_words_of_their_own_but_the_early_year(mixed):
    """A word common in date_inconsistency positives (>= 1 % of them) also occurs in
    negatives, except the early end year that is the evidence: no template, phrase or
    count marks a disordered timeline."""

    def vocabulary(texts):
        counts: dict[str, int] = {}
        for text in texts:
            for word in set(re.findall(r"[A-Za-z0-9-]+", text)):
                counts[word] = counts.get(word, 0) + 1
        return counts

    y = mixed.labels[:, PROPOSAL_LABELS.index("date_inconsistency")]
    pos = vocabulary(t for t, v in zip(mixed.texts, y, strict=True) if v)
    neg = vocabulary(t for t, v in zip(mixed.texts, y, strict=True) if not v)
    common = {w for w, c in pos.items() if c >= 0.01 * y.sum()}
    assert common - set(neg) == {"2022", "2023"}, sorted(common - set(neg))


def test_disordered_timeline_has_one_phase_ending_before_any_start(mixed):
    """Whole years, each phase one year and the next starting in the year it ends; a
    disordered timeline differs only in one phase that ends in 2022 or 2023, a year
    before every timeline's start (so a year only disordered documents write)."""
    y = mixed.labels[:, PROPOSAL_LABELS.index("date_inconsistency")]
    for text, label in zip(mixed.texts, y, strict=True):
        years = [int(v) for v in re.findall(r"\b(20\d\d)\b", text)]
        pairs = list(zip(years[::2], years[1::2], strict=True))
        assert 2 <= len(pairs) <= 3 and all(2022 <= v <= 2028 for v in years)
        assert sum(b in (2022, 2023) for a, b in pairs) == label
        assert all(a >= 2024 for a, b in pairs)
        assert all(b == a + 1 for a, b in pairs if b >= 2024)
        assert check_proposal(text)["date_inconsistency"] == bool(label)


def test_misspellings_are_never_a_name_and_only_inconsistent_documents_have_one(mixed):
    """The evidence of name_inconsistency is local: a later mention writes one of a fixed
    list of surname misspellings, and no misspelling is the correct spelling of any name."""
    names = set(FIRST_NAMES) | set(SURNAME_TYPOS)
    typos = {t for v in SURNAME_TYPOS.values() for t in v}
    assert not typos & names and len(typos) == sum(len(v) for v in SURNAME_TYPOS.values())
    y = mixed.labels[:, PROPOSAL_LABELS.index("name_inconsistency")]
    for text, label in zip(mixed.texts, y, strict=True):
        people = re.findall(r"(?:Dr\.|Professor) ([A-Z]\w+) ([A-Z]\w+)", text)
        intro = text.splitlines()[1]
        first = re.search(r"(?:Dr\.|Professor) ([A-Z]\w+) ([A-Z]\w+)", intro).groups()
        assert set(first) <= names  # the introduction spells the name right
        written = [w for person in people for w in person]
        assert sum(w in typos for w in written) == label
        assert all(w in names | typos for w in written)


def test_crosswalk_cites_an_objective_no_document_lists(mixed):
    """Every document lists Objectives 1-3; a wrong crosswalk cites Objective 4 or 5."""
    y = mixed.labels[:, PROPOSAL_LABELS.index("crosswalk_error")]
    for text, label in zip(mixed.texts, y, strict=True):
        assert re.findall(r"^Objective (\d+):", text, re.MULTILINE) == ["1", "2", "3"]
        cited = [int(k) for k in re.findall(r"Objective (\d+)\b(?!:)", text)]
        assert 1 <= len(cited) <= 3 and len(set(cited)) == len(cited)
        assert sum(k in (4, 5) for k in cited) == label and all(1 <= k <= 5 for k in cited)


BASE = """Title: Measuring Soil Carbon Across Rural Counties
The principal investigator is Dr. Jon Smith, who has led several earlier studies.
Objective 1: Measure baseline conditions.
Objective 2: Compare outcomes.
In the standards crosswalk, Objective 2 aligns with Standard 4.1.
Phase 1 begins on 12 March 2024 and ends on 30 June 2024. Phase 2 runs from 1 July 2024 to 30 June 2025.
Budget decisions will be approved by Professor Jon Smith."""


@pytest.mark.parametrize(
    ("label", "old", "new"),
    [
        ("crosswalk_error", "Objective 2 aligns", "Objective 3 aligns"),
        ("banned_phrases", "several earlier", "several world-class"),
        ("name_inconsistency", "Professor Jon Smith", "Professor John Smith"),
        ("name_inconsistency", "Professor Jon Smith", "Professor Jon Smyth"),
        ("name_inconsistency", "Professor Jon Smith", "Professor Jon Smtih"),
        ("date_inconsistency", "1 July 2024", "1 June 2024"),
        ("date_inconsistency", "ends on 30 June 2024", "ends on 30 January 2024"),
    ],
)
def test_checker_flags_hand_made_edits(label, old, new):
    assert not any(check_proposal(BASE).values())
    edited = BASE.replace(old, new)
    assert edited != BASE
    assert check_proposal(edited) == {name: name == label for name in PROPOSAL_LABELS}


def test_checker_reads_month_first_dates():
    text = BASE.replace("12 March 2024", "March 12, 2024").replace("1 July 2024", "July 1, 2024")
    assert not check_proposal(text)["date_inconsistency"]
    assert check_proposal(text.replace("July 1, 2024", "June 1, 2024"))["date_inconsistency"]


def test_checker_reads_month_only_dates():
    text = BASE.replace("12 March 2024", "March 2024").replace("1 July 2024", "July 2024")
    assert not check_proposal(text)["date_inconsistency"]
    assert check_proposal(text.replace("July 2024", "June 2024"))["date_inconsistency"]
    assert check_proposal(text.replace("July 2024", "March 2024"))["date_inconsistency"]


def test_checker_reads_year_only_dates():
    text = BASE.replace(
        "Phase 1 begins on 12 March 2024 and ends on 30 June 2024. "
        "Phase 2 runs from 1 July 2024 to 30 June 2025.",
        "Phase 1 runs from 2024 to 2025. Phase 2 runs from 2025 to 2026.",
    )
    assert "from 2025 to 2026" in text
    assert not check_proposal(text)["date_inconsistency"]  # a phase may start the year one ends
    assert check_proposal(text.replace("2025 to 2026", "2026 to 2025"))["date_inconsistency"]
    assert check_proposal(text.replace("2024 to 2025", "2025 to 2024"))["date_inconsistency"]
    assert check_proposal(text.replace("2025 to 2026", "2024 to 2026"))["date_inconsistency"]


def test_bad_label_frequencies_name_the_key():
    with pytest.raises(ValueError, match=rf"{KEY}\.label_frequencies.*unknown"):
        generate_proposals(5, 0, {"typos": 0.5})
    with pytest.raises(ValueError, match=rf"{KEY}\.label_frequencies\.banned_phrases"):
        generate_proposals(5, 0, {"banned_phrases": 1.5})


def test_subset_by_indices_and_mask(mixed):
    part = mixed.subset([5, 2])
    assert part.texts == [mixed.texts[5], mixed.texts[2]]
    assert np.array_equal(part.labels, mixed.labels[[5, 2]]) and part.labels.dtype == np.uint8
    mask = mixed.labels[:, 0] == 1
    assert len(mixed.subset(mask)) == int(mask.sum()) and mixed.subset(mask).labels[:, 0].all()


# ----------------------------------------------------------------------------- GoEmotions


@pytest.fixture(scope="module")
def goemotions_original() -> dict[str, TextDataset]:
    if not GOEMOTIONS.is_dir():
        pytest.skip(f"GoEmotions is absent ({GOEMOTIONS} not found)")
    return {split: load_goemotions(GOEMOTIONS / "original", split) for split in ("train", "dev")}


@needs_goemotions
def test_goemotions_original_has_28_labels_and_the_published_rows(goemotions_original):
    train, dev = goemotions_original["train"], goemotions_original["dev"]
    test = load_goemotions(GOEMOTIONS / "original", "test")
    assert len(train.label_names) == 28 and train.label_names[0] == "admiration"
    assert (len(train), len(dev), len(test)) == (43_410, 5_426, 5_427)
    for data in (train, dev, test):
        assert data.labels.shape == (len(data), 28) and data.labels.dtype == np.uint8
        assert data.labels.sum(axis=1).min() >= 1


@needs_goemotions
def test_goemotions_rows_match_the_file(goemotions_original):
    train = goemotions_original["train"]
    lines = (GOEMOTIONS / "original" / "train.tsv").read_text(encoding="utf-8").splitlines()
    text, ids, _ = lines[0].split("\t")
    assert train.texts[0] == text
    expected = {train.label_names[int(k)] for k in ids.split(",")}
    assert {train.label_names[j] for j in np.flatnonzero(train.labels[0])} == expected
    # every row, read with nothing but str.split, gives the same texts and label ids
    rows = [line.split("\t") for line in lines]
    assert train.texts == [row[0] for row in rows]
    assert [np.flatnonzero(r).tolist() for r in train.labels] == [
        sorted(int(k) for k in row[1].split(",")) for row in rows
    ]
    assert train.labels.sum(axis=1).max() >= 2  # multi-label rows exist


@needs_goemotions
def test_goemotions_ekman_has_7_labels():
    dev = load_goemotions(GOEMOTIONS / "ekman", "dev")
    assert len(dev.label_names) == 7 and "joy" in dev.label_names
    assert len(dev) == 5_426 and dev.labels.sum(axis=1).min() >= 1


def test_goemotions_wrong_folder_names_the_key(tmp_path):
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "labels.txt").write_text("a\nb\n")
    with pytest.raises(FileNotFoundError, match=rf"{KEY}\.path.*original"):
        load_goemotions(tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        load_goemotions(tmp_path, "validation")


# ----------------------------------------------------------------------------- tables


def test_load_table_csv_and_tsv(tmp_path):
    csv_file = tmp_path / "rows.csv"
    csv_file.write_text('text,spam,urgent\n"hello, world",0,1\nbuy now,1,0\nplain,0,0\n')
    data = load_table(csv_file)
    assert data.texts == ["hello, world", "buy now", "plain"]
    assert data.label_names == ["spam", "urgent"]
    assert data.labels.tolist() == [[0, 1], [1, 0], [0, 0]] and data.labels.dtype == np.uint8

    tsv_file = tmp_path / "rows.tsv"
    tsv_file.write_text("id\tbody\ta\tb\n1\tfirst, with comma\t1\t1\n2\tsecond\t0\t1\n")
    data = load_table(tsv_file, text_column="body", label_columns=["b", "a"])
    assert data.texts == ["first, with comma", "second"]
    assert data.label_names == ["b", "a"] and data.labels.tolist() == [[1, 1], [1, 0]]


def test_load_table_rejects_non_binary_labels(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("text,ok,score\nx,0,1\ny,1,2\n")
    with pytest.raises(ValueError, match=r"'score'.*'2'"):
        load_table(path)
    assert load_table(path, label_columns=["ok"]).labels.tolist() == [[0], [1]]
    path.write_text("text,ok\nx,0\ny,\n")
    with pytest.raises(ValueError, match=r"'ok'"):
        load_table(path)


def test_load_table_missing_columns_and_files(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("sentence,a\nx,1\n")
    with pytest.raises(ValueError, match=rf"'text'.*{KEY}\.text_column"):
        load_table(path)
    with pytest.raises(ValueError, match=rf"\['b'\].*{KEY}\.label_columns"):
        load_table(path, text_column="sentence", label_columns=["a", "b"])
    with pytest.raises(FileNotFoundError, match=rf"{KEY}\.path"):
        load_table(tmp_path / "absent.csv")


# ----------------------------------------------------------------------------- splits


def test_load_splits_proposals():
    data = {"source": "proposals", "n_train": 60, "n_dev": 20, "label_frequencies": None}
    splits = load_splits(data, seed=3)
    assert (len(splits["train"]), len(splits["dev"])) == (60, 20)
    assert splits["train"].label_names == list(PROPOSAL_LABELS)
    assert not set(splits["train"].texts) & set(splits["dev"].texts)
    assert splits["train"].texts == load_splits(data, seed=3)["train"].texts
    assert splits["train"].texts == generate_proposals(60, 3).texts
    assert load_splits(data, seed=4)["train"].texts != splits["train"].texts
    only = load_splits({**data, "label_frequencies": {"date_inconsistency": 1.0}}, seed=3)
    assert only["dev"].labels[:, 3].all()
    with pytest.raises(ValueError, match=rf"{KEY}\.n_train"):
        load_splits({**data, "n_train": None}, seed=3)


@needs_goemotions
def test_load_splits_goemotions_caps_are_seeded():
    data = {"source": "goemotions", "path": str(GOEMOTIONS / "original"), "n_train": 500}
    splits = load_splits({**data, "n_dev": 100}, seed=1)
    assert (len(splits["train"]), len(splits["dev"])) == (500, 100)
    assert len(splits["train"].label_names) == 28
    again = load_splits({**data, "n_dev": 100}, seed=1)
    assert again["train"].texts == splits["train"].texts
    other = load_splits({**data, "n_dev": 100}, seed=2)
    assert other["train"].texts != splits["train"].texts
    full = load_splits({**data, "n_dev": None}, seed=1)
    assert len(full["dev"]) == 5_426
    assert set(splits["train"].texts) <= set(
        load_goemotions(GOEMOTIONS / "original", "train").texts
    )
    with pytest.raises(ValueError, match=rf"{KEY}\.path"):
        load_splits({"source": "goemotions", "path": None}, seed=0)


def _table(path: Path, n: int, offset: int = 0) -> Path:
    lines = ["text,x,y"] + [f"row {i + offset},{i % 2},{(i // 2) % 2}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_splits_table_fraction_and_caps(tmp_path):
    path = _table(tmp_path / "all.csv", 50)
    data = {"source": "table", "path": str(path), "text_column": "text", "label_columns": None}
    splits = load_splits({**data, "dev_fraction": 0.2}, seed=0)
    train, dev = splits["train"], splits["dev"]
    assert (len(train), len(dev)) == (40, 10) and train.label_names == ["x", "y"]
    assert sorted(train.texts + dev.texts) == sorted(f"row {i}" for i in range(50))
    assert load_splits({**data, "dev_fraction": None}, seed=0)["dev"].texts == dev.texts
    assert load_splits({**data, "dev_fraction": 0.2}, seed=1)["dev"].texts != dev.texts
    capped = load_splits({**data, "n_train": 15, "n_dev": 4}, seed=0)
    assert (len(capped["train"]), len(capped["dev"])) == (15, 4)
    assert set(capped["train"].texts) <= set(train.texts)
    with pytest.raises(ValueError, match=rf"{KEY}\.dev_fraction"):
        load_splits({**data, "dev_fraction": 1.0}, seed=0)


def test_load_splits_table_dev_path(tmp_path):
    train_file = _table(tmp_path / "train.tsv", 30).rename(tmp_path / "train.csv")
    dev_file = _table(tmp_path / "dev.csv", 8, offset=100)
    data = {"source": "table", "path": str(train_file), "dev_path": str(dev_file), "n_dev": 5}
    splits = load_splits(data, seed=0)
    assert len(splits["train"]) == 30 and len(splits["dev"]) == 5
    assert all(t.startswith("row 1") for t in splits["dev"].texts)
    other = tmp_path / "other.csv"
    other.write_text("text,z\nq,1\n")
    with pytest.raises(ValueError, match=rf"{KEY}\.dev_path"):
        load_splits({**data, "dev_path": str(other)}, seed=0)


def test_load_splits_unknown_source():
    with pytest.raises(ValueError, match=rf"{KEY}\.source"):
        load_splits({"source": "imdb"}, seed=0)

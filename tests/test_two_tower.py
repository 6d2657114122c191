"""The two_tower workload (seed report 003): FAISS search and mining, the mining schedule,
the synthetic pairs, pairs files, retrieval metrics, and real runs (in process and
through the launcher) that check mining is timed apart from training."""

from __future__ import annotations

import copy
import itertools
import json
import time
from importlib import metadata

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import small_config
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench.common.records import read_record
from trainbench.launch.launcher import run_cell
from trainbench.measure import training
from trainbench.measure.context import RunContext
from trainbench.measure.cpu_features import cpu_flags
from trainbench.measure.devices import get_device
from trainbench.measure.trackers import TRAIN
from trainbench.workloads import faiss_process
from trainbench.workloads import two_tower as tt

SCHEDULE_KEY = "workloads.two_tower.mine_schedule"
PATH_KEY = "workloads.two_tower.data.path"


def tt_settings(**overrides) -> dict:
    config = small_config()
    config["workloads"] = {"two_tower": overrides}
    return tbconfig.validate_config(config)["workloads"]["two_tower"]


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# ----------------------------------------------------------------------------- FAISS


def test_faiss_search_matches_brute_force_numpy():
    rng = np.random.default_rng(0)
    docs, queries = unit(rng, 500, 32), unit(rng, 50, 32)
    scores, ids = tt.faiss_search(queries, docs, 10)

    brute = queries @ docs.T
    expected_ids = np.argsort(-brute, axis=1)[:, :10]
    assert ids.shape == (50, 10) and scores.shape == (50, 10)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, np.take_along_axis(brute, expected_ids, 1), atol=1e-5)
    # Tensors (non-contiguous, float64) give the same answer as the arrays.
    t_docs = torch.from_numpy(docs.astype(np.float64).T.copy()).T
    assert not t_docs.is_contiguous()
    _, ids_t = tt.faiss_search(torch.from_numpy(queries), t_docs, 10)
    np.testing.assert_array_equal(ids_t, expected_ids)
    # k beyond the bank is capped, not padded with -1.
    assert tt.faiss_search(queries[:2], docs[:7], 20)[1].shape == (2, 7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_to_faiss_gives_cpu_float32_c_contiguous_numpy(dtype):
    base = torch.randn(16, 8, dtype=torch.float32).to(dtype)
    strided = base.T  # (8, 16), a non-contiguous view
    assert not strided.is_contiguous()
    grad = strided.clone().requires_grad_(True) if dtype != torch.float16 else strided
    for tensor in (strided, grad, base[:, ::2]):
        out = tt.to_faiss(tensor)
        assert isinstance(out, np.ndarray)
        assert out.dtype == np.float32
        assert out.flags["C_CONTIGUOUS"]
        np.testing.assert_allclose(out, tensor.detach().float().numpy(), rtol=1e-6)
    # numpy input gets the same treatment.
    fortran = np.asfortranarray(np.ones((4, 3), dtype=np.float64))
    out = tt.to_faiss(fortran)
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    with pytest.raises(ValueError, match="2-D"):
        tt.to_faiss(torch.zeros(3))


def test_mining_excludes_the_positive_and_returns_k_distinct_negatives():
    rng = np.random.default_rng(1)
    docs = unit(rng, 300, 16)
    positives = rng.integers(0, 300, size=80)
    # Each query sits next to its positive, so the positive ranks first and must be dropped.
    queries = docs[positives] + 0.05 * unit(rng, 80, 16)
    k = 5
    negatives, facts = tt.mine_hard_negatives(queries, docs, positives, k, candidates=12)

    assert negatives.shape == (80, k) and negatives.dtype == np.int64
    assert facts["positive_at_rank1"] == 1.0 and facts["positive_in_candidates"] == 1.0
    assert not (negatives == positives[:, None]).any()
    assert all(len(set(row)) == k for row in negatives.tolist())
    # They are the nearest non-positive documents, in rank order.
    brute = np.argsort(-(queries @ docs.T), axis=1)
    for row, pos, negs in zip(brute, positives, negatives, strict=True):
        assert negs.tolist() == [i for i in row if i != pos][:k]


def test_select_hard_negatives_skips_fillers_and_refuses_too_few():
    ids = np.array([[4, 2, 9, 7], [1, 3, -1, -1]])  # -1: FAISS had no more documents
    negatives, facts = tt.select_hard_negatives(ids, np.array([5, 3]), 1)
    assert negatives.tolist() == [[4], [1]]
    assert facts == {"positive_in_candidates": 0.5, "positive_at_rank1": 0.0}
    # Row 2 has one candidate besides its positive: k=2 cannot be met.
    with pytest.raises(ValueError, match="workloads.two_tower.mining.candidates"):
        tt.select_hard_negatives(ids, np.array([5, 3]), 2)


# ----------------------------------------------------------------------------- schedule


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-1:none,2-9:faiss", [(0, 1, "none"), (2, 9, "faiss")]),
        ("0-0:none,1-99:faiss", [(0, 0, "none"), (1, 99, "faiss")]),
        (" 2 - 4 : faiss , 0:none ", [(0, 0, "none"), (2, 4, "faiss")]),
        ("0-30:none", [(0, 30, "none")]),
        ("3:faiss", [(3, 3, "faiss")]),
    ],
)
def test_mine_schedule_parses(text, expected):
    assert tt.parse_mine_schedule(text) == expected


def test_mining_mode_per_epoch_uncovered_epochs_are_none():
    schedule = tt.parse_mine_schedule("1-2:faiss,4:faiss")
    assert [tt.mining_mode(schedule, e) for e in range(6)] == [
        "none", "faiss", "faiss", "none", "faiss", "none",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("0-2:none,2-5:faiss", "overlap"),
        ("0-9:faiss,3-4:none", "overlap"),
        ("5-2:faiss", "ends before it starts"),
        ("0-1:bogus", "unknown mode"),
        ("0-1:FAISS", "unknown mode"),
        ("faiss", "cannot read"),
        ("0-1:none,,2:faiss", "cannot read"),
        ("0-1-2:none", "cannot read"),
        ("-1-2:faiss", "cannot read"),
        ("", "empty"),
    ],
)
def test_mine_schedule_rejects_garbage_naming_the_key(text, fragment):
    with pytest.raises(ValueError, match=SCHEDULE_KEY) as info:
        tt.parse_mine_schedule(text)
    assert fragment in str(info.value)


def test_config_and_prepare_data_refuse_bad_schedules_and_mining(tmp_path):
    with pytest.raises(tbconfig.ConfigError, match=SCHEDULE_KEY):
        tt_settings(mine_schedule="every epoch")
    with pytest.raises(ValueError, match=SCHEDULE_KEY):  # the schema cannot see overlaps
        tt.prepare_data(tt_settings(mine_schedule="0-3:none,1:faiss"), tmp_path, 0)
    with pytest.raises(ValueError, match="workloads.two_tower.mining.candidates"):
        tt.prepare_data(tt_settings(mining={"k": 4, "candidates": 4}), tmp_path, 0)
    with pytest.raises(tbconfig.ConfigError, match="unknown key `temprature`"):
        tt_settings(temprature=0.1)


def test_schema_defaults():
    s = tt_settings()
    assert s["batch_sizes"] == [64]
    assert s["data"] == {
        "source": "synthetic", "path": None, "n_train": 2048, "n_heldout": 256,
        "vocab_size": 2000, "doc_length": 32, "query_length": 12, "topics": 32, "noise": 0.3,
    }  # fmt: skip
    assert s["model"]["rnn"] == "lstm" and s["model"]["shared_weights"] is False
    assert (s["model"]["embedding_dim"], s["model"]["hidden_dim"], s["model"]["output_dim"]) == (
        64, 64, 64,
    )  # fmt: skip
    assert s["temperature"] == 0.05 and s["mine_schedule"] == "0-0:none,1-99:faiss"
    assert s["mining"] == {"k": 4, "candidates": 20, "faiss_threads": None}
    assert s["optimizer"] == {"lr": 0.002, "weight_decay": 0.0}
    tt.parse_mine_schedule(s["mine_schedule"])


# ----------------------------------------------------------------------------- data


def synth(seed=0, n=400, noise=0.3):
    return tt.synthetic_pairs(n, 500, 32, 12, 8, noise, seed)


def test_synthetic_pairs_are_deterministic():
    a, b = synth(7), synth(7)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], synth(8)[1])


def test_queries_are_noisy_paraphrases_of_their_document():
    queries, docs, topic = synth()
    assert queries.shape == (400, 12) and docs.shape == (400, 32)
    assert docs.min() >= 1 and docs.max() < 500
    lengths = (queries != 0).sum(axis=1)
    assert lengths.min() >= 6 and lengths.max() <= 12
    # Padding only at the end.
    assert all(
        (row[n:] == 0).all() and (row[:n] != 0).all()
        for row, n in zip(queries, lengths, strict=True)
    )
    own = tt.token_overlap(queries, docs)
    other = tt.token_overlap(queries, np.roll(docs, 7, axis=0))
    assert own.mean() > 0.6
    assert other.mean() < 0.25
    assert own.mean() > 4 * other.mean()
    # Noise really changes tokens; without it every query token is in its document.
    assert own.mean() < 0.95
    clean_q, clean_d, _ = synth(noise=0.0)
    assert tt.token_overlap(clean_q, clean_d).min() == 1.0
    # Not a prefix: the subset is shuffled.
    assert (
        np.mean([np.array_equal(q[:3], d[:3]) for q, d in zip(clean_q, clean_d, strict=True)]) < 0.1
    )


def test_prepare_data_builds_the_bank_from_both_splits(tmp_path):
    settings = tt_settings(data={"n_train": 300, "n_heldout": 50, "vocab_size": 400})
    meta = tt.prepare_data(settings, tmp_path / "a", 3)
    again = tt.prepare_data(settings, tmp_path / "b", 3)
    assert {k: v for k, v in meta.items()} == again
    assert (meta["n_train"], meta["n_heldout"], meta["bank_size"]) == (300, 50, 350)
    a, b = np.load(tmp_path / "a" / tt.DATA_FILE), np.load(tmp_path / "b" / tt.DATA_FILE)
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])
    queries, docs, _ = tt.synthetic_pairs(350, 400, 32, 12, 32, 0.3, 3)
    np.testing.assert_array_equal(a["bank"][a["train_pos"]], docs[:300])
    np.testing.assert_array_equal(a["bank"][a["heldout_pos"]], docs[300:])
    np.testing.assert_array_equal(a["heldout_query"], queries[300:])
    assert meta["heldout_token_overlap"]["own_document"] > 0.5


# ----------------------------------------------------------------------------- pairs files


def write_pairs_npz(path, n=60, dup=True):
    queries, docs, _ = tt.synthetic_pairs(n, 300, 20, 10, 4, 0.2, 11)
    if dup:
        docs[1] = docs[0]  # two queries of one document
    np.savez(path, query_ids=queries.astype(np.int32), doc_ids=docs)
    return queries, docs


def test_pairs_file_npz(tmp_path):
    queries, docs = write_pairs_npz(tmp_path / "pairs.npz")
    settings = tt_settings(
        data={"source": "pairs_file", "path": str(tmp_path / "pairs.npz"), "n_train": None,
              "n_heldout": 10, "doc_length": 16, "query_length": 12},
    )  # fmt: skip
    meta = tt.prepare_data(settings, tmp_path / "out", 0)
    assert (meta["n_train"], meta["n_heldout"]) == (50, 10)
    assert meta["duplicate_documents_merged"] == 1 and meta["bank_size"] == 59
    assert meta["vocab_size"] == int(max(queries.max(), docs.max())) + 1
    assert meta["truncated_share"]["document"] == 1.0  # 20 tokens cut to 16
    arrays = np.load(tmp_path / "out" / tt.DATA_FILE)
    assert arrays["bank"].shape == (59, 16) and arrays["train_query"].shape == (50, 12)
    # Every pair's positive is its own document (truncated), whichever split it is in.
    train_idx, held_idx = tt.split_indices(60, None, 10, 0)
    np.testing.assert_array_equal(arrays["bank"][arrays["train_pos"]], docs[train_idx, :16])
    np.testing.assert_array_equal(arrays["bank"][arrays["heldout_pos"]], docs[held_idx, :16])
    np.testing.assert_array_equal(arrays["train_query"][:, :10], queries[train_idx])


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: None, "does not exist"),
        (lambda p: np.savez(p, queries=np.ones((3, 2), int)), "lacks doc_ids, query_ids"),
        (lambda p: np.savez(p, query_ids=np.ones((3, 2)), doc_ids=np.ones((3, 2), int)), "integer"),
        (lambda p: np.savez(p, query_ids=np.ones((3, 2), int), doc_ids=np.ones((4, 2), int)),
         "give one row per pair"),
        (lambda p: np.savez(p, query_ids=np.ones((3, 2), int), doc_ids=np.ones((3, 2), int)),
         "lower `workloads.two_tower.data.n_heldout`"),
    ],
)  # fmt: skip
def test_pairs_file_errors_name_the_key(tmp_path, make, fragment):
    path = tmp_path / "pairs.npz"
    make(path)
    # The config check refuses a missing file before any job runs; the workload's
    # own guard (for settings that reach it another way) is tested past that check.
    settings = tt_settings(data={"source": "pairs_file", "path": __file__, "n_heldout": 5})
    settings["data"]["path"] = str(path)
    with pytest.raises(tt.PairsFileError, match=PATH_KEY) as info:
        tt.prepare_data(settings, tmp_path / "out", 0)
    assert fragment in str(info.value)


def test_config_check_refuses_a_missing_pairs_file(tmp_path):
    data = {"source": "pairs_file", "path": str(tmp_path / "absent.npz")}
    with pytest.raises(tbconfig.ConfigError, match="does not exist"):
        tt_settings(data=data)
    with pytest.raises(tbconfig.ConfigError, match=f"{PATH_KEY}` is required"):
        tt_settings(data={"source": "pairs_file"})


def test_pairs_file_needs_a_path_and_a_known_suffix(tmp_path):
    settings = tt_settings(data={"source": "pairs_file", "path": __file__})
    settings["data"]["path"] = None
    with pytest.raises(tt.PairsFileError, match=f"{PATH_KEY}`: is required"):
        tt.prepare_data(settings, tmp_path, 0)
    (tmp_path / "pairs.csv").write_text("query,document\n")
    data = {"source": "pairs_file", "path": str(tmp_path / "pairs.csv")}
    with pytest.raises(tt.PairsFileError, match="neither .npz nor .parquet"):
        tt.prepare_data(tt_settings(data=data), tmp_path, 0)


TEXT_FRAME = pd.DataFrame(
    {
        "query": ["red apple", "green pear", "blue sky", "zebra stripes", "red pear", "sky blue"],
        "document": [
            "a red apple tree",
            "green pear juice",
            "the blue sky above",
            "zebra stripes are black",
            "red pear and apple",
            "blue sky at night",
        ],
    }  # fmt: skip
)


def test_parquet_texts_get_a_whitespace_vocabulary_from_the_training_split(tmp_path, monkeypatch):
    path = tmp_path / "pairs.parquet"
    path.write_bytes(b"")  # read_parquet is replaced: no parquet engine is installed here
    monkeypatch.setattr(pd, "read_parquet", lambda p: TEXT_FRAME.copy())
    data = {"source": "pairs_file", "path": str(path), "n_heldout": 2, "vocab_size": 100,
            "doc_length": 6, "query_length": 3}  # fmt: skip
    settings = tt_settings(data=data)
    loaded = tt.load_pairs(settings["data"], 0)
    train_idx, held_idx = tt.split_indices(6, 2048, 2, 0)
    train_texts = [TEXT_FRAME["query"][i] for i in train_idx] + [
        TEXT_FRAME["document"][i] for i in train_idx
    ]
    vocab = tt.whitespace_vocabulary(train_texts, 100)
    assert min(vocab.values()) == 2  # 0 = padding, 1 = unknown
    assert loaded["vocab_size"] == len(vocab) + 2
    for row, i in zip(loaded["heldout_query"], held_idx, strict=True):
        words = TEXT_FRAME["query"][i].split()
        assert row.tolist() == [vocab.get(w, tt.UNK) for w in words] + [0] * (3 - len(words))
    train_words = {w for t in train_texts for w in t.split()}
    held_words = [w for i in held_idx for t in TEXT_FRAME.loc[i] for w in t.split()]
    unknown = np.mean([w not in train_words for w in held_words])
    assert loaded["facts"]["heldout_unknown_token_share"] == pytest.approx(unknown)
    # The capped vocabulary keeps the most frequent tokens.
    assert len(tt.whitespace_vocabulary(train_texts, 5)) == 3
    meta = tt.prepare_data(settings, tmp_path / "out", 0)
    assert meta["bank_size"] == 6 and meta["tokenizer"].startswith("whitespace")


def test_parquet_token_id_lists_and_frame_errors(tmp_path, monkeypatch):
    frame = pd.DataFrame({"query": [[3, 4], [5], [6, 7, 8]], "document": [[3, 4, 9], [5, 2], [6]]})
    raw = tt.pairs_from_frame(frame)
    assert raw["kind"] == "ids"
    padded, cut = tt.pad_sequences(raw["document"], 2)
    assert padded.tolist() == [[3, 4], [5, 2], [6, 0]] and cut == pytest.approx(1 / 3)
    with pytest.raises(tt.PairsFileError, match=f"{PATH_KEY}.*lacks the column"):
        tt.pairs_from_frame(frame.rename(columns={"document": "doc"}))
    with pytest.raises(tt.PairsFileError, match="both be texts or both be token ids"):
        tt.pairs_from_frame(pd.DataFrame({"query": ["a b"], "document": [[1, 2]]}))
    # Without a parquet engine the error says what to install or how to convert.
    path = tmp_path / "pairs.parquet"
    path.write_bytes(b"")

    def no_engine(p):
        raise ImportError("Unable to find a usable engine")

    monkeypatch.setattr(pd, "read_parquet", no_engine)
    with pytest.raises(tt.PairsFileError, match=f"{PATH_KEY}.*pip install pyarrow"):
        tt.read_pairs_file(path)


# ----------------------------------------------------------------------------- metrics, model


def test_retrieval_metrics_on_a_hand_made_ranking():
    ranked = np.array([[3, 1, 2, 0], [0, 5, 7, 1], [9, 8, 4, 2], [2, 4, 6, 8]])
    positives = np.array([1, 0, 6, 8])  # ranks 2, 1, absent, 4
    metrics = tt.retrieval_metrics(ranked, positives, ks=(1, 2, 4))
    assert metrics["recall@1"] == pytest.approx(1 / 4)
    assert metrics["recall@2"] == pytest.approx(2 / 4)
    assert metrics["recall@4"] == pytest.approx(3 / 4)
    assert metrics["mrr"] == pytest.approx((1 / 2 + 1 + 0 + 1 / 4) / 4)
    assert set(tt.retrieval_metrics(ranked, positives)) == {"recall@1", "recall@5", "recall@10",
                                                            "mrr"}  # fmt: skip


def test_random_baseline_is_the_average_over_all_rankings():
    bank = 5
    rankings = np.array(list(itertools.permutations(range(bank))))
    for depth in (5, 3):
        metrics = tt.retrieval_metrics(rankings[:, :depth], np.zeros(len(rankings), int), (1, 2))
        baseline = tt.random_baseline(bank, depth, (1, 2))
        assert metrics == pytest.approx(baseline)


@pytest.mark.parametrize("rnn, pooling", [("lstm", "mean"), ("gru", "last")])
def test_towers_normalise_ignore_padding_and_share_weights_on_request(rnn, pooling):
    model_settings = tt_settings(model={"rnn": rnn, "pooling": pooling})["model"]
    torch.manual_seed(0)
    model = tt.TwoTower(50, model_settings).eval()
    assert model.query_tower is not model.doc_tower
    assert isinstance(model.query_tower.rnn, torch.nn.LSTM if rnn == "lstm" else torch.nn.GRU)
    assert model.query_tower.rnn.batch_first
    ids = torch.tensor([[5, 6, 7, 0, 0], [9, 1, 2, 3, 4]])
    with torch.no_grad():
        out = model.encode_query(ids)
        padded = model.encode_query(torch.cat([ids, torch.zeros(2, 3, dtype=torch.long)], 1))
    assert out.shape == (2, 64) and out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=1), torch.ones(2))
    torch.testing.assert_close(out, padded)  # trailing padding changes nothing
    assert not torch.allclose(model.encode_query(ids), model.encode_doc(ids))
    assert model.query_tower.embedding.weight.std().item() == pytest.approx(0.05, rel=0.2)

    shared = tt.TwoTower(50, {**model_settings, "shared_weights": True})
    assert shared.query_tower is shared.doc_tower
    count = sum(p.numel() for p in shared.parameters())
    assert 2 * count == sum(p.numel() for p in model.parameters())


def test_contrastive_logits_masks_shared_positives_and_appends_hard_negatives():
    q = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    d = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    hard = torch.nn.functional.normalize(torch.randn(3, 2, 4), dim=2)
    logits = tt.contrastive_logits(q, d, torch.tensor([7, 7, 2]), hard)
    assert logits.shape == (3, 5)
    assert logits[0, 1] == float("-inf") and logits[1, 0] == float("-inf")  # same document
    torch.testing.assert_close(logits[:, :3].diagonal(), (q * d).sum(1))
    torch.testing.assert_close(logits[2, 3:], hard[2] @ q[2])


def test_contrastive_logits_are_float32_products_even_under_autocast():
    """At initialisation the similarities of a row differ by thousandths: a bf16 product
    rounds them to a handful of values. The logits (and the loss) are float32 products
    of float32 inputs whatever autocast the caller runs under."""
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(64, 32), dim=1)
    d = torch.nn.functional.normalize(q[0] + 0.01 * torch.randn(64, 32), dim=1)
    hard = torch.nn.functional.normalize(q[0] + 0.01 * torch.randn(64, 3, 32), dim=2)
    expected = torch.cat(
        [q.double() @ d.double().T, torch.einsum("bd,bkd->bk", q, hard).double()], 1
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        naive = (q @ d.T).float()  # what the workload did before: a bf16 product, cast after
        logits = tt.contrastive_logits(q, d, None, hard)
        loss = tt.contrastive_loss(logits, 0.05)
    assert logits.dtype == torch.float32 and loss.dtype == torch.float32
    torch.testing.assert_close(logits.double(), expected, rtol=0, atol=1e-6)
    # The hazard the test guards against is real: bf16 collapses the row's values.
    assert len(torch.unique(naive[0])) < 0.5 * len(torch.unique(logits[0, :64]))
    assert (naive - expected[:, :64]).abs().max() > 1e-3
    # Inputs that arrive in bf16 (a tower's output under autocast) are upcast first.
    low = tt.contrastive_logits(q.bfloat16(), d.bfloat16())
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, q.bfloat16().float() @ d.bfloat16().float().T)
    reference = torch.nn.functional.cross_entropy(logits / 0.05, torch.arange(64))
    torch.testing.assert_close(loss, reference)


# ----------------------------------------------------------------------------- runs


def run_in_process(spec: dict) -> dict:
    """What the child does, without the process: the workload's run(ctx)."""
    device = get_device(spec["backend"], spec["device_settings"])
    settings_in_force = device.apply_settings()
    ctx = RunContext(
        spec=spec,
        device=device,
        torch_device=device.torch_device(),
        amp=device.amp_policy(),
        settings_in_force=settings_in_force,
    )
    return tt.run(ctx)


@pytest.mark.slow
def test_mining_and_search_are_never_inside_a_timed_region(tmp_path, monkeypatch):
    """The clock intervals of every FAISS search (slowed by 0.2 s) never meet the
    loop's timed regions or its timed evaluation; mining searches happen inside
    before_epoch and their time is reported under extra.mining. FAISS only ever
    receives CPU float32 C-contiguous numpy arrays."""
    delay = 0.2
    arrays: list[np.ndarray] = []
    searches: list[tuple[float, float]] = []
    timed: list[tuple[float, float]] = []
    evaluations: list[tuple[float, float]] = []
    hooks: list[tuple[float, float]] = []
    real_search, real_run_training = tt.faiss_search, tt.run_training
    real_process_search = faiss_process.FaissProcess.search

    def recording_search(self, queries, docs, k):  # what reaches the FAISS process
        arrays.extend([queries, docs])
        return real_process_search(self, queries, docs, k)

    def slow_search(*args, **kwargs):
        t0 = time.perf_counter()
        time.sleep(delay)
        out = real_search(*args, **kwargs)
        searches.append((t0, time.perf_counter()))
        return out

    class RecordingTimer(training.StepTimer):
        """The step timer, also keeping each training region's clock interval."""

        def start(self, kind):
            super().start(kind)
            if kind == TRAIN:
                self.t0 = time.perf_counter()

        def stop(self, kind, seconds):
            super().stop(kind, seconds)
            if kind == TRAIN:
                timed.append((self.t0, time.perf_counter()))

    def clocked(fn, intervals):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            intervals.append((t0, time.perf_counter()))
            return out

        return wrapper

    def recording_run_training(parts, ctx):
        parts.evaluate = clocked(parts.evaluate, evaluations)
        parts.before_epoch = clocked(parts.before_epoch, hooks)
        return real_run_training(parts, ctx)

    monkeypatch.setattr(faiss_process.FaissProcess, "search", recording_search)
    monkeypatch.setattr(tt, "faiss_search", slow_search)
    monkeypatch.setattr(training, "StepTimer", RecordingTimer)
    monkeypatch.setattr(tt, "run_training", recording_run_training)
    wl = {"batch_sizes": [32], "epochs": 3, "warmup_steps": 1, "mine_schedule": "1-5:faiss",
          "data": {"n_train": 128, "n_heldout": 32, "vocab_size": 200}}  # fmt: skip
    config = tbconfig.validate_config(tiny_config(devices=["cpu"], workloads={"two_tower": wl}))
    tt.prepare_data(config["workloads"]["two_tower"], tmp_path, config["seed"])
    spec = tbconfig.cell_spec(config, tbconfig.Cell("two_tower", "cpu", 32, 0), str(tmp_path))
    result = run_in_process(spec)

    def overlaps(a, b):
        return a[0] < b[1] and b[0] < a[1]

    # one training region per stretch between the curve's passes (the default cadence
    # puts several in an epoch; and one per extension region after the last epoch,
    # which lengthens this tiny model's short window), one evaluation per pass, then
    # calibration passes of the final model
    extension = result["extension"]["regions"]
    passes = len(result["quality"]["points"])
    assert passes > 3  # the epochs are split
    assert len(timed) == passes + extension and len(evaluations) >= passes and len(hooks) == 3
    # two mining epochs and the scoring of each pass of the curve (calibration passes
    # of the final model are timed but not scored)
    assert len(searches) == 2 + passes
    for search in searches:
        assert not any(overlaps(search, region) for region in timed + evaluations)
    mining_searches = [s for s in searches if any(h[0] <= s[0] and s[1] <= h[1] for h in hooks)]
    assert len(mining_searches) == 2

    mining = [e["extra"]["mining"] for e in result["epochs"]]
    assert [m["mode"] for m in mining] == ["none", "faiss", "faiss"]
    for m, search in zip(mining[1:], mining_searches, strict=True):
        assert m["search_seconds"] >= delay
        assert m["seconds"] >= search[1] - search[0]
    # The window is every step from its start (warm-up or the steady state's start,
    # which may lie in the extension), epochs and extension alike.
    steps = result["steps"]
    every = [s for part in steps["seconds"] + steps["extension_seconds"] for s in part]
    assert result["timed"]["seconds"] == pytest.approx(sum(every[result["warmup"]["steps"] :]))
    assert result["mining"]["seconds"] == pytest.approx(sum(m["seconds"] for m in mining))
    # the queries and the bank of each search, and of the FAISS process's warm-up search
    assert len(arrays) == 2 * (len(searches) + 1)
    for array in arrays:
        assert type(array) is np.ndarray
        assert array.dtype == np.float32 and array.flags["C_CONTIGUOUS"]


def test_the_faiss_process_is_passive_and_warmed_whatever_the_cell_asks(monkeypatch):
    """The worker's OpenMP threads sleep when a search ends (OMP_WAIT_POLICY=PASSIVE,
    even where the cell's environment asks for ACTIVE): none spins into the timed steps
    after a search. Its start and its warm-up search are timed for the record."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    process = faiss_process.FaissProcess()
    try:
        assert process.facts["omp_wait_policy"] == "PASSIVE"
        assert process.facts["start_seconds"] > 0
        assert process.warm_up(16, 20) > 0
        assert process.facts["warmup_search_seconds"] > 0
    finally:
        process.close()


@pytest.mark.slow
def test_a_new_phase_is_warmed_untimed_and_trains_as_without_it(tmp_path, monkeypatch):
    """The mining phase's first work never falls in a timed region: the FAISS process
    has searched (its warm-up) before the first timed step, and the first step with hard
    negatives runs in the hook before the phase's first timed region (the phase
    warm-up), recorded in that epoch alone. Without the warm-up the run's losses are
    the same to the bit: it changes no parameter, no optimizer state, no data order."""
    hard_calls: list[float] = []  # clock of each step with hard negatives
    searches: list[float] = []
    timed: list[tuple[float, float]] = []
    real_logits = tt.contrastive_logits
    real_process_search = faiss_process.FaissProcess.search

    def recording_logits(q, d, pos=None, hard=None):
        if hard is not None and torch.is_grad_enabled():
            hard_calls.append(time.perf_counter())
        return real_logits(q, d, pos, hard)

    def recording_search(self, queries, docs, k):
        searches.append(time.perf_counter())
        return real_process_search(self, queries, docs, k)

    class RecordingTimer(training.StepTimer):
        def start(self, kind):
            super().start(kind)
            if kind == TRAIN:
                self.t0 = time.perf_counter()

        def stop(self, kind, seconds):
            super().stop(kind, seconds)
            if kind == TRAIN:
                timed.append((self.t0, time.perf_counter()))

    monkeypatch.setattr(tt, "contrastive_logits", recording_logits)
    monkeypatch.setattr(faiss_process.FaissProcess, "search", recording_search)
    monkeypatch.setattr(training, "StepTimer", RecordingTimer)
    wl = {"batch_sizes": [32], "epochs": 3, "warmup_steps": 1, "mine_schedule": "1-5:faiss",
          "data": {"n_train": 128, "n_heldout": 32, "vocab_size": 200},
          "mining": {"faiss_threads": 1}}  # fmt: skip
    quick = {"extend_short_windows": False, "max_eval_passes": 0, "eval_every": {"epochs": 1}}
    config = tbconfig.validate_config(
        tiny_config(devices=["cpu"], workloads={"two_tower": wl}, timing=quick)
    )
    tt.prepare_data(config["workloads"]["two_tower"], tmp_path, config["seed"])
    spec = tbconfig.cell_spec(config, tbconfig.Cell("two_tower", "cpu", 32, 0), str(tmp_path))
    result = run_in_process(spec)

    assert searches[0] < timed[0][0]  # the FAISS process warmed before any timed step
    mining = result["settings"]["mining"]
    assert mining["faiss_wait_policy"] == "PASSIVE"
    assert mining["faiss_warmup_search_seconds"] > 0 and mining["faiss_start_seconds"] > 0
    # The phase's first step with hard negatives, and every warm-up pass, is untimed.
    warm = [e["extra"]["mining"].get("phase_warmup") for e in result["epochs"]]
    assert warm[0] is None and warm[2] is None
    assert warm[1]["passes"] == 2 and len(warm[1]["per_pass"]) == 2
    assert warm[1]["seconds"] > 0 and "no optimizer step" in warm[1]["what"]
    phase_start = min(t0 for t0, _ in timed if t0 > hard_calls[0])
    assert len([t for t in hard_calls if t < phase_start]) == warm[1]["passes"]
    for t in hard_calls[: warm[1]["passes"]]:
        assert not any(t0 <= t <= t1 for t0, t1 in timed)
    assert result["mining"]["phase_warmup_seconds"] == pytest.approx(warm[1]["seconds"])
    counters = [e["extra"]["mining"]["process_counters"] for e in result["epochs"]]
    assert all(c["minor_faults"] >= 0 and c["system_seconds"] >= 0 for c in counters)

    monkeypatch.setattr(tt, "warm_phase", lambda *args, **kwargs: {"passes": 0})
    cold = run_in_process(spec)
    assert cold["steps"]["losses"] == result["steps"]["losses"]
    assert [e["eval_metrics"] for e in cold["epochs"]] == [
        e["eval_metrics"] for e in result["epochs"]
    ]


@pytest.mark.slow
def test_cpu_cell_through_the_launcher(tmp_path):
    wl = {"batch_sizes": [64], "epochs": 3, "warmup_steps": 2,
          "data": {"n_train": 1024, "n_heldout": 128}, "mining": {"faiss_threads": 1}}  # fmt: skip
    # No extension: the timed total checked below is the epochs' regions alone (a stall
    # on a busy machine would otherwise extend the window).
    config = tbconfig.validate_config(
        tiny_config(
            devices=["cpu"],
            workloads={"two_tower": copy.deepcopy(wl)},
            timing={"extend_short_windows": False},
        )
    )
    meta = tt.prepare_data(config["workloads"]["two_tower"], tmp_path / "data", config["seed"])
    assert meta["bank_size"] == 1024 + 128
    spec = tbconfig.cell_spec(
        config, tbconfig.Cell("two_tower", "cpu", 64, 0), str(tmp_path / "data")
    )
    returned = run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    record = read_record(tmp_path / "metrics.json")
    assert record == json.loads(json.dumps(returned))
    assert record["status"] == "ok", record.get("error")

    result = record["result"]
    epochs = result["epochs"]
    assert len(epochs) == 3
    mining = [e["extra"]["mining"] for e in epochs]
    assert [m["mode"] for m in mining] == ["none", "faiss", "faiss"]
    assert mining[0]["seconds"] == 0.0 and mining[0]["index"] is None
    for m in mining[1:]:
        assert m["seconds"] > 0 and m["encode_seconds"] > 0 and m["search_seconds"] > 0
        assert m["seconds"] >= m["encode_seconds"] + m["search_seconds"]
        assert (m["index"], m["bank_size"], m["k"]) == ("IndexFlatIP", 1152, 4)
        assert m["faiss_threads"] == 1
    # Mining is reported apart; the timed total is the epochs' timed regions alone.
    assert result["timed"]["seconds"] == pytest.approx(sum(e["timed_seconds"] for e in epochs))
    assert result["mining"]["seconds"] == pytest.approx(sum(m["seconds"] for m in mining))
    # the window starts at the later of warmup_steps (2) and the detected steady state
    assert result["warmup"]["steps"] >= 2
    assert result["timed"]["steps"] == 3 * (1024 // 64) - result["warmup"]["steps"]

    baseline = result["settings"]["random_baseline"]["mrr"]
    for epoch in epochs:
        metrics = epoch["eval_metrics"]
        assert set(metrics) == {"recall@1", "recall@5", "recall@10", "mrr"}
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
        assert metrics["recall@1"] <= metrics["recall@5"] <= metrics["recall@10"]
        assert epoch["eval_samples"] == 128 + 1152
    mrr = [e["eval_metrics"]["mrr"] for e in epochs]
    assert mrr[-1] > 5 * baseline and mrr[-1] > mrr[0], mrr
    task = result["task"]
    assert task["primary_metric"] == "mrr" and task["higher_is_better"] is True
    assert task["final"] == mrr[-1] and task["best"] == max(mrr)

    settings = result["settings"]
    assert settings["faiss_version"] == metadata.version("faiss-cpu")
    assert settings["rnn"] == "lstm" and settings["shared_weights"] is False
    assert settings["mining_per_epoch"] == ["none", "faiss", "faiss"]
    assert settings["mining"]["faiss_threads_requested"] == 1
    assert settings["bank_size"] == 1152
    assert result["verification"]["all_on_device"] is True


@pytest.mark.slow
@pytest.mark.cpu_autocast("bfloat16", "LSTM")
def test_bf16_autocast_learns_as_well_as_float32(tmp_path):
    """A tiny two_tower trained in process twice from the same seed, in float32 and under
    CPU bf16 autocast: with the similarities and the loss in float32, bf16 reaches about
    the float32 held-out MRR, far above a random ranking (it stalled near chance when the
    similarity product ran in bf16)."""
    wl = {"batch_sizes": [64], "epochs": 3, "warmup_steps": 1, "mine_schedule": "0-99:none",
          "data": {"n_train": 1024, "n_heldout": 128, "vocab_size": 300, "topics": 16},
          "model": {"embedding_dim": 32, "hidden_dim": 32, "output_dim": 32},
          "optimizer": {"lr": 0.01}}  # fmt: skip
    results = {}
    for autocast in ("off", "bf16"):
        config = tbconfig.validate_config(
            tiny_config(
                devices=["cpu"],
                device_settings={"cpu": {"threads": 1, "autocast": autocast}},
                workloads={"two_tower": copy.deepcopy(wl)},
            )
        )
        if autocast == "off":
            tt.prepare_data(config["workloads"]["two_tower"], tmp_path, config["seed"])
        spec = tbconfig.cell_spec(config, tbconfig.Cell("two_tower", "cpu", 64, 0), str(tmp_path))
        results[autocast] = run_in_process(spec)
    assert results["bf16"]["verification"]["autocast_active"] is True
    chance = results["off"]["task"]["random_baseline"]["mrr"]
    fp32, bf16 = results["off"]["task"]["best"], results["bf16"]["task"]["best"]
    assert fp32 > 10 * chance, (fp32, chance)
    assert bf16 > 10 * chance and abs(bf16 - fp32) < 0.25 * fp32, (bf16, fp32, chance)


@pytest.mark.skipif(
    "avx2" not in cpu_flags()[0], reason="ONEDNN_MAX_CPU_ISA=AVX2 needs an x86 CPU with AVX2"
)
@pytest.mark.slow
def test_bf16_cell_without_the_lstm_kernel_is_an_unavailable_record(tmp_path, monkeypatch):
    """A real child with oneDNN capped at AVX2 (no bf16 instructions): the two_tower
    cell under CPU bf16 autocast is recorded ``unavailable`` with the probe's one line
    (dtype, kernel, instruction set), not a crash inside oneDNN's LSTM."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    wl = {"batch_sizes": [32], "epochs": 1, "warmup_steps": 1, "mine_schedule": "0-99:none",
          "data": {"n_train": 128, "n_heldout": 32, "vocab_size": 100, "topics": 4},
          "model": {"embedding_dim": 8, "hidden_dim": 8, "output_dim": 8}}  # fmt: skip
    config = tbconfig.validate_config(
        tiny_config(
            devices=["cpu"],
            device_settings={"cpu": {"threads": 1, "autocast": "bf16"}},
            workloads={"two_tower": wl},
        )
    )
    tt.prepare_data(config["workloads"]["two_tower"], tmp_path / "data", config["seed"])
    spec = tbconfig.cell_spec(
        config, tbconfig.Cell("two_tower", "cpu", 32, 0), str(tmp_path / "data")
    )
    run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    record = read_record(tmp_path / "metrics.json")
    assert record["status"] == "unavailable", record.get("error")
    assert record["reason"].startswith("CPU autocast bfloat16 unavailable: LSTM fails under it (")
    assert "oneDNN capped at AVX2 by ONEDNN_MAX_CPU_ISA" in record["reason"]
    assert "\n" not in record["reason"]
    env = record["environment"]  # the ISA found is in the record's environment
    assert env["device"]["isa"]["onednn_max_cpu_isa"] == "AVX2"
    assert env["behaviour_variables"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert "avx2" in env["cpu_precision_flags"]

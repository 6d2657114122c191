"""The two_tower workload's data (seed report 003): synthetic query-document pairs
(noisy paraphrases drawn from topics), or a pairs file read with its ids checked;
the whitespace vocabulary, padding, the train / held-out split and the document bank.
The workload (:mod:`trainbench.workloads.two_tower`) builds and trains on them."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

KEY = "workloads.two_tower"
PAD, UNK = 0, 1


class PairsFileError(ValueError):
    """A pairs file that cannot be used; the message names the config key and the fix."""


def synthetic_pairs(
    n: int,
    vocab_size: int,
    doc_length: int,
    query_length: int,
    topics: int,
    noise: float,
    seed: int,
    background: float = 0.15,
    concentration: float = 0.3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic (queries, docs, topic) for ``n`` pairs; token 0 is padding.

    The vocabulary is split into ``topics`` disjoint groups. A document picks a
    topic and its own Dirichlet(``concentration``) weights over that topic's
    tokens (so documents of one topic differ in which tokens dominate), and draws
    each token from them, or with probability ``background`` from the whole
    vocabulary. Its query is a shuffled subset of its tokens (half to all of
    ``query_length``), each replaced with probability ``noise`` by its synonym (a
    fixed pairing inside the topic) or by a random token; right-padded with 0."""
    rng = np.random.default_rng(seed)
    tokens = rng.permutation(np.arange(1, vocab_size))
    groups = np.array_split(tokens, topics)
    synonym = np.arange(vocab_size)
    for group in groups:
        half = len(group) // 2 * 2
        synonym[group[0:half:2]] = group[1:half:2]
        synonym[group[1:half:2]] = group[0:half:2]

    topic = rng.integers(0, topics, size=n)
    docs = np.empty((n, doc_length), dtype=np.int64)
    for i in range(n):
        group = groups[topic[i]]
        weights = rng.dirichlet(np.full(len(group), concentration))
        docs[i] = group[rng.choice(len(group), size=doc_length, p=weights)]
    from_background = rng.random((n, doc_length)) < background
    docs = np.where(from_background, rng.integers(1, vocab_size, size=(n, doc_length)), docs)

    low = max(1, math.ceil(query_length / 2))
    high = min(query_length, doc_length)
    lengths = rng.integers(min(low, high), high + 1, size=n)
    queries = np.zeros((n, query_length), dtype=np.int64)
    for i in range(n):
        positions = rng.permutation(doc_length)[: lengths[i]]
        query = docs[i, positions].copy()
        replace = rng.random(lengths[i]) < noise
        use_synonym = rng.random(lengths[i]) < 0.5
        query = np.where(replace & use_synonym, synonym[query], query)
        random_tokens = rng.integers(1, vocab_size, size=lengths[i])
        query = np.where(replace & ~use_synonym, random_tokens, query)
        queries[i, : lengths[i]] = query
    return queries, docs, topic


def token_overlap(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Per row: the share of a query's distinct tokens that occur in the document."""
    out = np.empty(len(queries))
    for i, (query, doc) in enumerate(zip(queries, docs, strict=True)):
        q = set(query[query != PAD].tolist())
        out[i] = len(q & set(doc.tolist())) / max(1, len(q))
    return out


def pad_sequences(seqs: list, length: int) -> tuple[np.ndarray, float]:
    """Ragged token-id lists -> (n, length) int64, right-padded with 0 or truncated;
    also the share of sequences that were truncated."""
    out = np.zeros((len(seqs), length), dtype=np.int64)
    truncated = 0
    for i, seq in enumerate(seqs):
        seq = np.asarray(seq, dtype=np.int64).reshape(-1)
        truncated += len(seq) > length
        out[i, : min(len(seq), length)] = seq[:length]
    return out, (truncated / len(seqs) if seqs else 0.0)


def fit_width(array: np.ndarray, length: int) -> tuple[np.ndarray, float]:
    """A padded (n, w) id array -> (n, length): cut or zero-pad the columns; also the
    share of rows that lost a token."""
    n, width = array.shape
    if width >= length:
        lost = float((array[:, length:] != PAD).any(axis=1).mean()) if width > length else 0.0
        return np.ascontiguousarray(array[:, :length]), lost
    out = np.zeros((n, length), dtype=array.dtype)
    out[:, :width] = array
    return out, 0.0


def whitespace_vocabulary(texts: list[str], size: int) -> dict[str, int]:
    """Lower-cased whitespace tokens of ``texts``, most frequent first (ties by
    token), ids from 2 (0 = padding, 1 = unknown), at most ``size`` ids in all."""
    counts = Counter(tok for text in texts for tok in str(text).lower().split())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(0, size - 2)]
    return {tok: i + 2 for i, (tok, _) in enumerate(ranked)}


def encode_texts(texts: list[str], vocab: dict[str, int]) -> list[list[int]]:
    return [[vocab.get(tok, UNK) for tok in str(text).lower().split()] for text in texts]


def _pairs_error(message: str) -> PairsFileError:
    return PairsFileError(f"`{KEY}.data.path`: {message}")


def _id_array(array: np.ndarray, name: str, path: Path) -> np.ndarray:
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
        raise _pairs_error(
            f"{path}: {name} must be a 2-D integer array (one row of token ids per pair, padded "
            f"with 0), got {array.dtype} of shape {array.shape}. Fix: write it with "
            f"np.savez(path, query_ids=..., doc_ids=...)."
        )
    if array.size and array.min() < 0:
        raise _pairs_error(f"{path}: {name} holds negative token ids; ids start at 1, 0 is padding")
    return array.astype(np.int64)


def read_pairs_file(path: str | Path) -> dict:
    """The raw pairs of a user file: {"kind": "ids", "query": [...], "document": [...]}
    (arrays or lists of token-id lists) or {"kind": "text", ...} (lists of str)."""
    path = Path(path)
    if not path.exists():
        raise _pairs_error(f"{str(path)!r} does not exist. Fix: correct the path.")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as arrays:
            missing = {"query_ids", "doc_ids"} - set(arrays.files)
            if missing:
                raise _pairs_error(
                    f"{path} lacks {', '.join(sorted(missing))} "
                    f"(it has {', '.join(arrays.files)}). "
                    "Fix: save the int arrays query_ids and doc_ids, one row per pair, 0-padded."
                )
            queries = _id_array(arrays["query_ids"], "query_ids", path)
            docs = _id_array(arrays["doc_ids"], "doc_ids", path)
        if len(queries) != len(docs):
            raise _pairs_error(
                f"{path}: query_ids has {len(queries)} rows, doc_ids {len(docs)}; "
                "give one row per pair in both"
            )
        return {"kind": "ids", "query": queries, "document": docs}
    if suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except ImportError as exc:
            raise _pairs_error(
                f"reading {path} needs a parquet engine ({exc}). Fix: `pip install pyarrow`, "
                "or convert the pairs to an .npz with int arrays query_ids and doc_ids."
            ) from exc
        return pairs_from_frame(frame, str(path))
    raise _pairs_error(
        f"{path} is neither .npz nor .parquet. Fix: give an .npz (query_ids, doc_ids) or a "
        ".parquet (columns query, document)."
    )


def pairs_from_frame(frame, source: str = "<frame>") -> dict:
    """Columns ``query``/``document`` of a DataFrame: token-id lists or texts."""
    missing = {"query", "document"} - set(frame.columns)
    if missing:
        raise _pairs_error(
            f"{source} lacks the column(s) {', '.join(sorted(missing))} (it has "
            f"{', '.join(map(str, frame.columns))}). Fix: name them query and document."
        )
    if frame[["query", "document"]].isna().any().any():
        raise _pairs_error(f"{source} has empty query or document cells; drop those rows")
    kinds = set()
    columns = {}
    for column in ("query", "document"):
        values = list(frame[column])
        if all(isinstance(v, str) for v in values):
            kinds.add("text")
        elif all(isinstance(v, (list, tuple, np.ndarray)) for v in values):
            kinds.add("ids")
            for v in values:
                if len(v) and not np.issubdtype(np.asarray(v).dtype, np.integer):
                    raise _pairs_error(f"{source}: column {column} holds non-integer token ids")
        else:
            raise _pairs_error(
                f"{source}: column {column} must hold only texts or only lists of token ids"
            )
        columns[column] = values
    if len(kinds) != 1:
        raise _pairs_error(f"{source}: query and document must both be texts or both be token ids")
    return {"kind": kinds.pop(), **columns}


def split_indices(n: int, n_train: int | None, n_heldout: int, seed: int):
    """Held-out pairs first from a seeded permutation, then (up to n_train) training pairs."""
    if n <= n_heldout:
        raise _pairs_error(
            f"the file has {n} pairs, not more than data.n_heldout={n_heldout}. Fix: lower "
            f"`{KEY}.data.n_heldout` or give more pairs."
        )
    order = np.random.default_rng(seed).permutation(n)
    held, train = order[:n_heldout], order[n_heldout:]
    return (train[:n_train] if n_train else train), held


def load_pairs(data: dict, seed: int) -> dict:
    """The pairs of a pairs_file source, split, as fixed-width id arrays."""
    if not data.get("path"):
        raise _pairs_error(
            "is required with data.source pairs_file. Fix: point it to an .npz (query_ids, "
            "doc_ids) or a .parquet (columns query, document)."
        )
    raw = read_pairs_file(data["path"])
    n = len(raw["query"])
    train_idx, held_idx = split_indices(n, data.get("n_train"), int(data["n_heldout"]), seed)
    q_len, d_len = int(data["query_length"]), int(data["doc_length"])
    facts: dict = {"pairs_in_file": n}
    if raw["kind"] == "text":
        train_texts = [raw["query"][i] for i in train_idx] + [raw["document"][i] for i in train_idx]
        vocab = whitespace_vocabulary(train_texts, int(data["vocab_size"]))
        queries = encode_texts(raw["query"], vocab)
        docs = encode_texts(raw["document"], vocab)
        held_tokens = [t for i in held_idx for t in queries[i] + docs[i]]
        facts["tokenizer"] = (
            "whitespace vocabulary built from the training split (0 pad, 1 unknown)"
        )
        facts["heldout_unknown_token_share"] = (
            float(np.mean([t == UNK for t in held_tokens])) if held_tokens else 0.0
        )
        vocab_size = len(vocab) + 2
    else:
        facts["tokenizer"] = "token ids from the file"
        queries, docs = raw["query"], raw["document"]
        vocab_size = None
    if isinstance(queries, np.ndarray):
        queries, q_cut = fit_width(queries, q_len)
        docs, d_cut = fit_width(docs, d_len)
    else:
        queries, q_cut = pad_sequences(queries, q_len)
        docs, d_cut = pad_sequences(docs, d_len)
    facts["truncated_share"] = {"query": q_cut, "document": d_cut}
    for name, array in (("query", queries), ("document", docs)):
        empty = np.flatnonzero((array == PAD).all(axis=1))
        if empty.size:
            raise _pairs_error(
                f"{empty.size} pairs have an empty {name} (all padding), "
                f"first row {int(empty[0])}; "
                "drop them from the file"
            )
    if vocab_size is None:
        vocab_size = int(max(queries.max(), docs.max())) + 1
    return {
        "train_query": queries[train_idx],
        "train_doc": docs[train_idx],
        "heldout_query": queries[held_idx],
        "heldout_doc": docs[held_idx],
        "vocab_size": vocab_size,
        "facts": facts,
    }


def build_bank(train_doc: np.ndarray, heldout_doc: np.ndarray):
    """The document bank (every distinct document of both splits) and each pair's
    positive as a bank index. Duplicate documents are merged, so a query's true
    document has exactly one bank entry."""
    docs = np.concatenate([train_doc, heldout_doc])
    bank, inverse = np.unique(docs, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return bank, inverse[: len(train_doc)], inverse[len(train_doc) :], len(docs) - len(bank)

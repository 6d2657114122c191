"""The text_multilabel workload (seed report 000): model sizes, metrics, pretrained loading."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, small_config
from sklearn.metrics import f1_score, precision_score, recall_score
from trainbench.config import ConfigError, validate_config
from trainbench.workloads import text_multilabel
from trainbench.workloads.metrics import multilabel_metrics


def text_settings(**overrides) -> dict:
    config = small_config()
    config["workloads"] = {"text_multilabel": overrides}
    return validate_config(config)["workloads"]["text_multilabel"]


def test_default_distilbert_config_has_the_seed_parameter_count():
    # Seed report 000: distilbert-base-uncased with 4 labels has 66,956,548 parameters.
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    model = DistilBertForSequenceClassification(DistilBertConfig(num_labels=4))
    assert sum(p.numel() for p in model.parameters()) == 66_956_548


def test_base_size_settings_build_the_same_model():
    settings = text_settings(
        max_length=128,
        model={"vocab_size": 30522, "max_position_embeddings": 512, "dim": 768, "n_layers": 6,
               "n_heads": 12, "hidden_dim": 3072},
    )  # fmt: skip
    model = text_multilabel.build_model(settings, num_labels=4, vocab_size=8000)
    assert sum(p.numel() for p in model.parameters()) == 66_956_548
    assert model.config.problem_type == "multi_label_classification"


def test_small_model_uses_the_tokenizer_vocabulary_and_bce():
    settings = text_settings(max_length=32)
    model = text_multilabel.build_model(settings, num_labels=3, vocab_size=500)
    assert model.distilbert.embeddings.word_embeddings.num_embeddings == 500
    ids = torch.randint(0, 500, (2, 32))
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels)
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_multilabel_metrics_agree_with_scikit_learn_on_a_hand_made_case():
    y_true = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 0, 0, 1]])
    y_pred = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 1]])
    names = ["a", "b", "c", "d"]
    metrics = multilabel_metrics(y_true, y_pred, names)
    # Hand count over all labels: TP 6, FP 2, FN 3 -> micro F1 = 2*6 / (2*6 + 2 + 3) = 12/17.
    assert metrics["micro_f1"] == pytest.approx(12 / 17)
    assert metrics["micro_f1"] == pytest.approx(f1_score(y_true, y_pred, average="micro"))
    assert metrics["macro_f1"] == pytest.approx(
        f1_score(y_true, y_pred, average="macro", zero_division=0)
    )
    per_label = {row["label"]: row for row in metrics["per_label"]}
    for i, name in enumerate(names):
        assert per_label[name]["precision"] == pytest.approx(
            precision_score(y_true[:, i], y_pred[:, i], zero_division=0)
        )
        assert per_label[name]["recall"] == pytest.approx(
            recall_score(y_true[:, i], y_pred[:, i], zero_division=0)
        )
        assert per_label[name]["accuracy"] == pytest.approx((y_true[:, i] == y_pred[:, i]).mean())
        assert per_label[name]["support"] == int(y_true[:, i].sum())
    # Label "a": TP 2, FP 0, FN 1 -> precision 1, recall 2/3.
    assert (per_label["a"]["precision"], per_label["a"]["recall"]) == (1.0, pytest.approx(2 / 3))
    assert metrics["subset_accuracy"] == pytest.approx(1 / 5)


def test_pretrained_model_loads_from_a_local_save_pretrained_folder(tmp_path):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    tiny = DistilBertForSequenceClassification(
        DistilBertConfig(vocab_size=200, dim=16, n_layers=1, n_heads=2, hidden_dim=32, num_labels=4,
                         max_position_embeddings=64)
    )  # fmt: skip
    tiny.save_pretrained(tmp_path / "tiny")
    settings = text_settings(max_length=32, model={"pretrained": str(tmp_path / "tiny")})
    model = text_multilabel.build_model(settings, num_labels=4, vocab_size=200)
    assert model.config.problem_type == "multi_label_classification"
    loaded = dict(model.named_parameters())
    for name, param in tiny.named_parameters():
        assert torch.equal(loaded[name], param), name


def test_pretrained_that_cannot_load_fails_with_instructions(tmp_path):
    (tmp_path / "empty").mkdir()
    settings = text_settings(max_length=32)
    settings["model"]["pretrained"] = str(tmp_path / "empty")
    with pytest.raises(text_multilabel.PretrainedLoadError, match="HF_HUB_OFFLINE=1"):
        text_multilabel.build_model(settings, num_labels=4, vocab_size=200)


@pytest.mark.parametrize(
    "pretrained, offline, fragment",
    [
        ("./no/such/folder", False, "does not exist"),
        ("trainbench-test/not-a-cached-model", True, "not in the Hugging Face cache"),
    ],
)
def test_config_refuses_a_pretrained_model_that_cannot_be_loaded(
    monkeypatch, tmp_path, pretrained, offline, fragment
):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = small_config()
    config["workloads"] = {"text_multilabel": {"model": {"pretrained": pretrained}}}
    with pytest.raises(ConfigError, match="workloads.text_multilabel.model.pretrained") as info:
        validate_config(config)
    assert fragment in str(info.value)


def test_trained_tokenizer_writes_cls_first_and_sep_last():
    """The classification head pools position 0, which must be [CLS]: the WordPiece
    tokenizer trained on the split writes "[CLS] ... [SEP]" as BERT's own does."""
    tokenizer = text_multilabel.train_wordpiece(
        ["objective one covers two years"] * 5, 100, 1, True
    )
    ids = tokenizer(["objective one covers two years"], padding="max_length", max_length=10)
    tokens = tokenizer.convert_ids_to_tokens(ids["input_ids"][0])
    assert tokens[:7] == ["[CLS]", "objective", "one", "covers", "two", "years", "[SEP]"]
    assert tokens[7:] == ["[PAD]"] * 3 and ids["attention_mask"][0] == [1] * 7 + [0] * 3


def test_loss_is_float32_bce_even_under_autocast():
    torch.manual_seed(0)
    logits = torch.randn(8, 4) * 3
    labels = (torch.rand(8, 4) < 0.3).float()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = text_multilabel.multilabel_loss(logits, labels)
        from_bf16 = text_multilabel.multilabel_loss(logits.bfloat16(), labels)
    assert loss.dtype == torch.float32 and from_bf16.dtype == torch.float32
    torch.testing.assert_close(loss, expected)
    reference = torch.nn.functional.binary_cross_entropy_with_logits(
        logits.bfloat16().float(), labels
    )
    torch.testing.assert_close(from_bf16, reference)


@pytest.fixture(scope="module")
def default_prepared(tmp_path_factory) -> tuple[dict, dict, object]:
    """(settings, metadata, output folder) of prepare_data on the default config's text
    workload, 600 training and 200 dev proposals."""
    import yaml

    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text())
    settings = validate_config({**small_config(), "workloads": {
        "text_multilabel": config["workloads"]["text_multilabel"]}})["workloads"]["text_multilabel"]  # fmt: skip
    settings["data"] = {**settings["data"], "n_train": 600, "n_dev": 200}
    out = tmp_path_factory.mktemp("default_text")
    return settings, text_multilabel.prepare_data(settings, out, seed=0), out


def test_default_config_proposals_fit_max_length(default_prepared):
    """The default config's proposals, tokenized as the workload does, are never cut."""
    settings, meta, out = default_prepared
    assert meta["truncated_fraction"] == {"train": 0.0, "dev": 0.0}
    arrays = np.load(out / text_multilabel.DATA_FILE)
    ids = arrays["train_input_ids"]
    assert ids.shape == (600, settings["max_length"])
    cls_id = text_multilabel.SPECIAL_TOKENS.index("[CLS]")  # special tokens come first
    assert (ids[:, 0] == cls_id).all()


def test_default_tokenizer_keeps_the_comparison_evidence_whole(default_prepared):
    """Every name and misspelling, every timeline year and every objective number the
    crosswalk may cite is one token of the WordPiece vocabulary trained on the split."""
    from trainbench.workloads.textdata.proposal_vocabulary import FIRST_NAMES, SURNAME_TYPOS
    from transformers import PreTrainedTokenizerFast

    _, _, out = default_prepared
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(out / text_multilabel.TOKENIZER_DIR))
    words = [*FIRST_NAMES, *(w for k, v in SURNAME_TYPOS.items() for w in (k, *v))]
    words += [str(y) for y in range(2022, 2029)] + ["1", "2", "3", "4", "5"]
    split = {w: tokenizer.tokenize(w) for w in words}
    assert {w: t for w, t in split.items() if t != [w.lower()]} == {}


def test_wordpiece_training_gives_one_vocabulary_for_one_corpus():
    """tokenizers' trainer numbers its ``##`` tokens in hash-map order and breaks ties
    between equally frequent merges by those numbers (huggingface/tokenizers#1794):
    the same split gave a different vocabulary, so different data, on each run."""
    import random

    rng = random.Random(0)
    stems = [f"w{i}" for i in range(400)]
    texts = [
        " ".join(rng.choice(stems) + rng.choice(["", "ing", "ed", "s"]) for _ in range(30))
        for _ in range(300)
    ]
    vocabularies = {
        tuple(sorted(text_multilabel.train_wordpiece(texts, 400, 2, True).get_vocab().items()))
        for _ in range(6)
    }
    assert len(vocabularies) == 1

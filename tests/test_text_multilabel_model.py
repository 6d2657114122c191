"""The text workload's classifier head: max pooling over the real tokens, or DistilBERT's own."""

import pytest
import torch
import torch.nn.functional as F
from trainbench.workloads.text_multilabel_model import PooledDistilBert
from transformers import DistilBertConfig, DistilBertForSequenceClassification


def tiny(pooling: str) -> PooledDistilBert:
    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=50, max_position_embeddings=16, dim=16, n_layers=1, n_heads=2,
        hidden_dim=32, num_labels=3, problem_type="multi_label_classification", pooling=pooling,
    )  # fmt: skip
    return PooledDistilBert(config).eval()


def test_max_pooling_ignores_padding_whatever_it_holds():
    model = tiny("max")
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    alone = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    padded_ids = torch.tensor([[1, 5, 7, 9, 2, 33, 44, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0]])
    padded = model(input_ids=padded_ids, attention_mask=mask).logits
    torch.testing.assert_close(padded, alone)


def test_max_pooling_reads_every_position_and_cls_only_the_first():
    """Changing one late token moves the max-pooled logits (a cue anywhere reaches the
    head); the feature-wise maximum is what the head reads."""
    model = tiny("max")
    a = torch.tensor([[1, 5, 7, 9, 2]])
    b = torch.tensor([[1, 5, 7, 30, 2]])
    mask = torch.ones_like(a)
    assert not torch.allclose(model(input_ids=a, attention_mask=mask).logits,
                              model(input_ids=b, attention_mask=mask).logits)  # fmt: skip
    hidden = model.distilbert(input_ids=a, attention_mask=mask)[0]
    expected = model.classifier(F.relu(model.pre_classifier(hidden.amax(dim=1))))
    torch.testing.assert_close(model(input_ids=a, attention_mask=mask).logits, expected)


def test_cls_pooling_is_distilberts_own_head():
    model = tiny("cls")
    reference = DistilBertForSequenceClassification(model.config).eval()
    reference.load_state_dict(model.state_dict())
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)


@pytest.mark.parametrize("pooling", ["max", "cls"])
def test_labels_give_the_multilabel_loss(pooling):
    """The Hugging Face Trainer (the throughput suite's comparison) reads the loss."""
    model = tiny(pooling)
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    labels = torch.tensor([[1.0, 0.0, 1.0]])
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, labels))

"""The text workload's classifier: DistilBERT with a choice of pooling.

``DistilBertForSequenceClassification`` reads the first token's final hidden state
(``pooling: cls``). A small DistilBERT trained from scratch on the proposals learns
only some of their four labels that way: each label's evidence is one rare token
somewhere in a ~110-token document, and the first token's attention settles on the
cues learned first. ``pooling: max`` (the default) reads the maximum of each feature
over the document's real tokens instead (max pooling over the encoder's states, as in
InferSent, Conneau et al. 2017), so a cue anywhere reaches the head whether or not an
attention head looks at it. The pre-classifier, dropout and classifier are
DistilBERT's own either way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DistilBertForSequenceClassification
from transformers.modeling_outputs import SequenceClassifierOutput

POOLINGS = ("max", "cls")


class PooledDistilBert(DistilBertForSequenceClassification):
    """DistilBertForSequenceClassification whose head reads ``config.pooling``:
    ``max`` (each feature's maximum over the unmasked tokens) or ``cls`` (the
    first token, DistilBERT's own forward)."""

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        if getattr(self.config, "pooling", "cls") == "cls":
            return super().forward(
                input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs
            )
        hidden = self.distilbert(input_ids=input_ids, attention_mask=attention_mask)[0]
        if attention_mask is not None:
            padding = attention_mask.unsqueeze(-1) == 0
            hidden = hidden.masked_fill(padding, torch.finfo(hidden.dtype).min)
        pooled = hidden.amax(dim=1)
        logits = self.classifier(self.dropout(F.relu(self.pre_classifier(pooled))))
        loss = None
        if labels is not None:
            loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return SequenceClassifierOutput(loss=loss, logits=logits)

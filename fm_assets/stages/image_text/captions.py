"""The caption stages of the image-text pipeline: the text stages, run on the caption (`text`)
with the pair's image columns carried through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.stages.decontaminate import DecontaminateStage
from fm_assets.stages.pii import PiiStage
from fm_assets.stages.tokenize import TokenizeStage
from fm_assets.storage.image_text_schemas import PAIRS, TOKENIZED_PAIRS


@dataclass(frozen=True)
class CaptionPiiStage(PiiStage):
    """Captions with emails, phones, public IPs and card numbers replaced by tokens.

    The text PII stage on the caption; every redaction recorded in pii_redactions.
    """

    name: ClassVar[str] = "caption_redacted_pairs"
    output_schema: ClassVar[pa.Schema] = PAIRS


@dataclass(frozen=True)
class CaptionDecontaminateStage(DecontaminateStage):
    """Pairs whose caption matches no registered evaluation item (or has it masked).

    The text decontamination stage on the caption, against the contamination registry.
    """

    name: ClassVar[str] = "decontaminated_pairs"
    output_schema: ClassVar[pa.Schema] = PAIRS


@dataclass(frozen=True)
class CaptionTokenizeStage(TokenizeStage):
    """Pairs with their caption tokenized by the registered default tokenizer.

    The text tokenize stage on the caption; the image and the caption stay beside the tokens.
    """

    name: ClassVar[str] = "tokenized_pairs"
    output_schema: ClassVar[pa.Schema] = TOKENIZED_PAIRS

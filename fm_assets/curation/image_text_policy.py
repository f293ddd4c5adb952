"""Per-dataset curation decisions for image-text pairs: decoding limits, the resize policy,
geometry and caption rules, near-duplicate distance, model scorers and their thresholds.

A source without an image-text entry gets the default image-text policy (`IMAGE_TEXT_POLICY`):
DataComp's "basic filtering" (Gadre et al., 2023, section 3.4: English captions by fastText,
here at lid.176 score >= 0.3, more than two words and five characters, the smaller image side
over 200 pixels, aspect ratio under 3), boilerplate alt text dropped, pHash near-duplicates
within Hamming distance 8 dropped, images re-encoded as JPEG (quality 90) with at most 512
pixels on the longer side, no model scorer (models are named by a local path, none ships with
the platform). `none` opts out of every rule (dedup and decoding still apply). Where the
numbers come from: docs/image_text.md.

Image-text policies live in the same TOML file as text policies (`FM_POLICY_FILE`), under
`image_text`, keyed by the batch's `source`:

    [image_text.default]                 # sources without an entry (absent: base "image-text")
    base = "none"
    [image_text.datasets.laion]
    base = "image-text"
    min_side = 256
    max_aspect_ratio = 2.5
    caption_languages = ["en", "de"]     # empty: every language
    near_dup_max_distance = 6
    [image_text.datasets.laion.resize]
    max_side = 384                       # 0: keep the size
    format = "webp"                      # jpeg, webp or png
    quality = 85
    [[image_text.datasets.laion.scorers]]
    name = "clip"                        # the key of its score in `scores`
    kind = "clip_similarity"             # see curation/images/scorers.py
    path = "/models/ViT-B-32"            # a local directory in open_clip's hub layout
    min = 0.28                           # keep pairs scoring at least this (or `max`)
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from typing import Any, Final

from fm_assets.curation.images.decode import DEFAULT_MAX_PIXELS
from fm_assets.curation.images.resize import ResizePolicy
from fm_assets.curation.policy import DECONTAMINATION_MODES
from fm_assets.settings import Settings

IMAGE_TEXT, NONE = "image-text", "none"
IMAGE_TEXT_BASES: Final = (IMAGE_TEXT, NONE)
SCORER_KINDS: Final = ("clip_similarity", "clip_head", "timm_classifier")


@dataclass(frozen=True)
class ScorerSpec:
    """One model scorer: its score's name, kind, local model path and threshold."""

    name: str
    kind: str  # one of SCORER_KINDS
    path: str  # a local directory (or file) holding the model; never fetched
    min: float | None = None  # keep pairs scoring at least this
    max: float | None = None  # keep pairs scoring at most this (NSFW, watermark)
    clip: str | None = None  # clip_head: the `clip_similarity` scorer whose embedding it reads
    label: int = 1  # timm_classifier: the class whose probability is the score
    batch_size: int = 32

    def decide(self, score: float) -> str | None:
        """None to keep; else a reason."""
        if self.min is not None and score < self.min:
            return f"{self.name} score {score:.3f} is below the policy's minimum {self.min:g}"
        if self.max is not None and score > self.max:
            return f"{self.name} score {score:.3f} is above the policy's maximum {self.max:g}"
        return None


@dataclass(frozen=True)
class ImageTextPolicy:
    """What one image-text dataset keeps. Defaults are the default image-text policy."""

    name: str = "default"
    base: str = IMAGE_TEXT
    max_pixels: int = DEFAULT_MAX_PIXELS
    resize: ResizePolicy = field(default_factory=ResizePolicy)
    min_side: int = 201  # DataComp: the smaller side "greater than 200 pixels"
    max_aspect_ratio: float = 3.0
    min_caption_chars: int = 6  # more than five characters
    min_caption_words: int = 3  # more than two words
    max_caption_chars: int = 2_000
    caption_languages: tuple[str, ...] = ("en",)  # () = every language
    # A caption is a sentence or less, on which lid.176 is rarely sure: real English captions of
    # the test photos score 0.49-0.92. 0.3 keeps them and turns away text the model recognises
    # nothing in (it gets the prior, ~0.12 for "en"; `curation/langid.py`).
    min_caption_language_score: float = 0.3
    drop_boilerplate_captions: bool = True
    near_dup_max_distance: int = 8
    scorers: tuple[ScorerSpec, ...] = ()
    pii_redaction: bool = True
    decontamination: str = "drop"

    def __post_init__(self) -> None:
        if not 0 <= self.near_dup_max_distance <= 16:
            raise ValueError(
                f"near_dup_max_distance must be 0..16 bits of the 64-bit pHash, got "
                f"{self.near_dup_max_distance}"
            )
        names = [s.name for s in self.scorers]
        if len(set(names)) != len(names):
            raise ValueError(f"scorer names must be unique, got {names}")

    def to_json(self) -> str:
        """Canonical JSON of every field: what a stage run records as the policy it ran under."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


IMAGE_TEXT_POLICY: Final = ImageTextPolicy()
NONE_IMAGE_TEXT_POLICY: Final = ImageTextPolicy(
    base=NONE,
    min_side=1,
    max_aspect_ratio=float("inf"),
    min_caption_chars=0,
    min_caption_words=0,
    max_caption_chars=1 << 30,
    caption_languages=(),
    min_caption_language_score=0.0,
    drop_boilerplate_captions=False,
)
_BASES: Final = {IMAGE_TEXT: IMAGE_TEXT_POLICY, NONE: NONE_IMAGE_TEXT_POLICY}
_SCALARS: Final = {
    "max_pixels": int,
    "min_side": int,
    "max_aspect_ratio": float,
    "min_caption_chars": int,
    "min_caption_words": int,
    "max_caption_chars": int,
    "min_caption_language_score": float,
    "drop_boilerplate_captions": bool,
    "near_dup_max_distance": int,
    "pii_redaction": bool,
}
_KNOWN: Final = frozenset(
    {*_SCALARS, "base", "resize", "caption_languages", "scorers", "decontamination"}
)


def load_image_text_policy(settings: Settings, dataset: str) -> ImageTextPolicy:
    """The image-text policy of `dataset`: its entry under `image_text` in settings.policy_file,
    else that section's `default`, else the default image-text policy; errors say where."""
    if settings.policy_file is None:
        return dataclasses.replace(IMAGE_TEXT_POLICY, name=dataset)
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    section = document.get("image_text", {})
    where = f"{settings.policy_file} [image_text]"
    entry = section.get("datasets", {}).get(dataset)
    if entry is not None:
        return parse_image_text_policy(dataset, entry, f"{where} datasets.{dataset}")
    return parse_image_text_policy(dataset, section.get("default", {}), f"{where} default")


def parse_image_text_policy(dataset: str, entry: dict[str, Any], where: str) -> ImageTextPolicy:
    """One TOML entry -> a policy; unknown keys and bad values raise, saying where."""
    unknown = set(entry) - _KNOWN
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_KNOWN)}")
    base_name = entry.get("base", IMAGE_TEXT)
    if base_name not in _BASES:
        raise ValueError(f"{where}: base {base_name!r}; known: {IMAGE_TEXT_BASES}")
    base = _BASES[base_name]
    values: dict[str, Any] = {}
    for key, kind in _SCALARS.items():
        if key in entry:
            value = entry[key]
            if kind is not bool and isinstance(value, bool):
                raise ValueError(f"{where}: {key} must be a number, got {value!r}")
            values[key] = kind(value)
    mode = entry.get("decontamination", {}).get("mode", base.decontamination)
    if mode not in DECONTAMINATION_MODES:
        raise ValueError(f"{where}: decontamination mode must be one of {DECONTAMINATION_MODES}")
    try:
        resize = ResizePolicy(**{**dataclasses.asdict(base.resize), **entry.get("resize", {})})
        return ImageTextPolicy(
            **{
                **dataclasses.asdict(base),
                **values,
                "name": dataset,
                "base": base_name,
                "resize": resize,
                "caption_languages": tuple(
                    sorted(entry.get("caption_languages", base.caption_languages))
                ),
                "scorers": tuple(_scorer(s, where) for s in entry.get("scorers", [])),
                "decontamination": mode,
            }
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _scorer(raw: dict[str, Any], where: str) -> ScorerSpec:
    known = {f.name for f in dataclasses.fields(ScorerSpec)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"{where}: a scorer has unknown keys {sorted(unknown)}; known: {known}")
    spec = ScorerSpec(**raw)
    if spec.kind not in SCORER_KINDS:
        raise ValueError(f"{where}: scorer {spec.name!r} kind {spec.kind!r}; known: {SCORER_KINDS}")
    if spec.kind == "clip_head" and not spec.clip:
        raise ValueError(
            f"{where}: clip_head scorer {spec.name!r} must name the clip_similarity scorer "
            "whose image embedding it reads (clip = NAME)"
        )
    return spec


def image_text_policy_from_json(text: str) -> ImageTextPolicy:
    """The policy a stage run recorded (`to_json`)."""
    raw = json.loads(text)
    raw["resize"] = ResizePolicy(**raw["resize"])
    raw["caption_languages"] = tuple(raw["caption_languages"])
    raw["scorers"] = tuple(ScorerSpec(**s) for s in raw["scorers"])
    return ImageTextPolicy(**raw)

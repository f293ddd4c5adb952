"""Model scorers for image-text pairs, each a model named by a local path (never downloaded):

- `clip_similarity`: an open_clip model in its hub layout (a directory holding
  `open_clip_config.json` and `open_clip_model.safetensors` or `open_clip_pytorch_model.bin`,
  what `huggingface-cli download` of an open_clip repo gives); the score is the cosine
  similarity of the image and caption embeddings (DataComp's "CLIP score" filter).
- `clip_head`: a small MLP over a clip_similarity scorer's normalized image embedding, the shape
  of LAION's aesthetic predictor and CLIP-based NSFW detector: a directory holding `head.json`
  (`{"layers": [768, 1024, 128, 64, 16, 1], "activation": "none" | "relu",
  "output": "identity" | "sigmoid" | "softmax"}`) and `head.safetensors` (`layers.N.weight`,
  `layers.N.bias`); with softmax the score is the probability of class `label`.
- `timm_classifier`: a timm image classifier in its hub layout (`config.json` with
  `architecture`, `num_classes` and `pretrained_cfg`, and `model.safetensors`), e.g. a watermark
  detector; the score is the probability of class `label`.

Models load once per worker process (keyed by path and content hash) on the GPU when one is
present, else the CPU, and score in batches of the spec's `batch_size`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from fm_assets.curation.image_text_policy import ScorerSpec

_MODELS: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def model_digest(path: str) -> str:
    """sha256 over the model's files (names and bytes): part of the scoring stage's content key,
    so replacing a model's weights reruns the stage."""
    root = Path(path)
    if not root.exists():
        raise ValueError(
            f"scorer model {path} does not exist; put the model there (models are never "
            "downloaded) or remove the scorer from the dataset's image-text policy"
        )
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode())
        with file.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _cached(kind: str, path: str, digest: str, load: Any) -> Any:
    with _LOCK:
        key = (kind, f"{path}@{digest}")
        if key not in _MODELS:
            _MODELS[key] = load(path)
        return _MODELS[key]


def _load_clip(path: str) -> tuple[Any, Any, Any]:
    import open_clip

    model, _, preprocess = open_clip.create_model_and_transforms(
        f"local-dir:{path}", device=device()
    )
    model.eval()
    return model, preprocess, open_clip.get_tokenizer(f"local-dir:{path}")


def _load_head(path: str) -> tuple[Any, str]:
    import torch
    from safetensors.torch import load_file

    config = json.loads((Path(path) / "head.json").read_text())
    sizes = [int(n) for n in config["layers"]]
    activation = config.get("activation", "none")
    layers = torch.nn.ModuleList([torch.nn.Linear(a, b) for a, b in itertools.pairwise(sizes)])
    module = torch.nn.Module()
    module.layers = layers
    module.load_state_dict(load_file(str(Path(path) / "head.safetensors")))
    module.to(device()).eval()
    if activation not in ("none", "relu"):
        raise ValueError(f"{path}/head.json: activation {activation!r}; known: none, relu")
    return module, f"{activation}:{config.get('output', 'identity')}"


def _load_timm(path: str) -> tuple[Any, Any]:
    import timm
    from safetensors.torch import load_file
    from timm.data import create_transform, resolve_data_config

    config = json.loads((Path(path) / "config.json").read_text())
    model = timm.create_model(
        config["architecture"], pretrained=False, num_classes=int(config["num_classes"])
    )
    model.load_state_dict(load_file(str(Path(path) / "model.safetensors")))
    model.to(device()).eval()
    data_config = resolve_data_config(config.get("pretrained_cfg", {}), model=model)
    return model, create_transform(**data_config)


def score_pairs(
    specs: Sequence[ScorerSpec],
    digests: Sequence[str],
    images: Sequence[Image.Image],
    captions: Sequence[str],
) -> list[dict[str, float]]:
    """name -> score for each pair, for every scorer in `specs` (digests: `model_digest`)."""
    import torch

    scores: list[dict[str, float]] = [{} for _ in images]
    embeddings: dict[str, Any] = {}
    digest_of = dict(zip((s.name for s in specs), digests, strict=True))
    with torch.inference_mode():
        for spec in specs:  # clip models first: heads read their embeddings
            if spec.kind != "clip_similarity":
                continue
            model, preprocess, tokenizer = _cached(
                spec.kind, spec.path, digest_of[spec.name], _load_clip
            )
            values, image_features = _clip_scores(
                model, preprocess, tokenizer, images, captions, spec.batch_size
            )
            embeddings[spec.name] = image_features
            for row, value in enumerate(values):
                scores[row][spec.name] = value
        for spec in specs:
            if spec.kind == "clip_head":
                head, shape = _cached(spec.kind, spec.path, digest_of[spec.name], _load_head)
                if spec.clip not in embeddings:
                    raise ValueError(
                        f"scorer {spec.name} reads the embedding of {spec.clip!r}, which is not "
                        "a clip_similarity scorer of the same policy"
                    )
                values = _head_scores(head, shape, embeddings[spec.clip], spec.label)
            elif spec.kind == "timm_classifier":
                model, transform = _cached(spec.kind, spec.path, digest_of[spec.name], _load_timm)
                values = _classifier_scores(model, transform, images, spec.label, spec.batch_size)
            else:
                continue
            for row, value in enumerate(values):
                scores[row][spec.name] = value
    return scores


def _clip_scores(
    model: Any,
    preprocess: Any,
    tokenizer: Any,
    images: Sequence[Image.Image],
    captions: Sequence[str],
    batch_size: int,
) -> tuple[list[float], Any]:
    import torch

    where = device()
    values: list[float] = []
    features = []
    for start in range(0, len(images), batch_size):
        pixels = torch.stack([preprocess(i) for i in images[start : start + batch_size]]).to(where)
        tokens = tokenizer(list(captions[start : start + batch_size])).to(where)
        image = torch.nn.functional.normalize(model.encode_image(pixels).float(), dim=-1)
        text = torch.nn.functional.normalize(model.encode_text(tokens).float(), dim=-1)
        values += (image * text).sum(dim=-1).cpu().tolist()
        features.append(image)
    return values, torch.cat(features) if features else torch.zeros(0)


def _head_scores(head: Any, shape: str, embeddings: Any, label: int) -> list[float]:
    import torch

    if len(embeddings) == 0:
        return []
    activation, output = shape.split(":")
    x = embeddings
    layers = list(head.layers)
    for i, layer in enumerate(layers):
        x = layer(x)
        if activation == "relu" and i < len(layers) - 1:
            x = torch.relu(x)
    if output == "sigmoid":
        x = torch.sigmoid(x)
    elif output == "softmax":
        x = torch.softmax(x, dim=-1)
    column = 0 if x.shape[-1] == 1 else label
    return [float(v) for v in x[:, column].cpu().tolist()]


def _classifier_scores(
    model: Any, transform: Any, images: Sequence[Image.Image], label: int, batch_size: int
) -> list[float]:
    import torch

    where = device()
    values: list[float] = []
    for start in range(0, len(images), batch_size):
        pixels = torch.stack([transform(i) for i in images[start : start + batch_size]]).to(where)
        probabilities = torch.softmax(model(pixels).float(), dim=-1)
        values += probabilities[:, label].cpu().tolist()
    return values

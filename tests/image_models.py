"""Tiny models in the published on-disk layouts the image-text scorers load (no weights can be
downloaded here): a randomly initialized open_clip CLIP in its hub layout, an MLP head over its
embedding (the shape of LAION's aesthetic and NSFW predictors), and a timm classifier in its hub
layout. Random weights: the scores mean nothing; the loading and scoring code is the real one."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

EMBED_DIM = 32
CLIP_CONFIG = {
    "embed_dim": EMBED_DIM,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16, "head_width": 32},
    "text_cfg": {
        "context_length": 32,
        "vocab_size": 49408,  # open_clip's own tokenizer (bundled BPE): no tokenizer download
        "width": 64,
        "heads": 2,
        "layers": 2,
    },
}


def tiny_clip(directory: Path, seed: int = 0) -> Path:
    """An open_clip model directory: `open_clip_config.json` and `open_clip_model.safetensors`."""
    import open_clip

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    model = open_clip.CLIP(**CLIP_CONFIG)  # type: ignore[arg-type]
    config = {
        "model_cfg": CLIP_CONFIG,
        "preprocess_cfg": {
            "mean": [0.48145466, 0.4578275, 0.40821073],
            "std": [0.26862954, 0.26130258, 0.27577711],
        },
    }
    (directory / "open_clip_config.json").write_text(json.dumps(config))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "open_clip_model.safetensors"))
    return directory


def tiny_head(directory: Path, output: str = "sigmoid", seed: int = 1) -> Path:
    """An MLP head over the tiny CLIP's image embedding: `head.json` and `head.safetensors`."""
    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    sizes = [EMBED_DIM, 16, 2 if output == "softmax" else 1]
    layers = [torch.nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]
    state = {}
    for i, layer in enumerate(layers):
        state[f"layers.{i}.weight"] = layer.weight.detach().contiguous()
        state[f"layers.{i}.bias"] = layer.bias.detach().contiguous()
    (directory / "head.json").write_text(
        json.dumps({"layers": sizes, "activation": "relu", "output": output})
    )
    save_file(state, str(directory / "head.safetensors"))
    return directory


def tiny_classifier(directory: Path, seed: int = 2) -> Path:
    """A timm classifier in its hub layout: `config.json` and `model.safetensors`."""
    import timm

    torch.manual_seed(seed)
    directory.mkdir(parents=True, exist_ok=True)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=2)
    config = {
        "architecture": "test_resnet",
        "num_classes": 2,
        "pretrained_cfg": {
            "input_size": [3, 64, 64],
            "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225],
            "crop_pct": 1.0,
            "interpolation": "bilinear",
        },
    }
    (directory / "config.json").write_text(json.dumps(config))
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(directory / "model.safetensors"),
    )
    return directory

"""Decode and validate one landed image with Pillow, and normalize it to 8-bit RGB.

A decoded image is upright (its EXIF orientation applied), 8-bit RGB (CMYK converted, palette
and alpha composited on white, 16-bit and float scaled to 8 bits) and one frame (the first of an
animation, whose frame count is kept). Anything else is an `ImageProblem` with a stable rule code
and a reason a person can act on; nothing raises on bad bytes.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Final

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

# Rule codes: stable, they become quarantine statistics.
ZERO_BYTE_IMAGE: Final = "zero_byte_image"
NOT_AN_IMAGE: Final = "not_an_image"
TRUNCATED_IMAGE: Final = "truncated_image"
WRONG_EXTENSION: Final = "wrong_extension"
DECOMPRESSION_BOMB: Final = "decompression_bomb"
UNSUPPORTED_IMAGE_FORMAT: Final = "unsupported_image_format"
CORRUPT_IMAGE: Final = "corrupt_image"
DECODE_RULES: Final = (
    ZERO_BYTE_IMAGE,
    NOT_AN_IMAGE,
    TRUNCATED_IMAGE,
    WRONG_EXTENSION,
    DECOMPRESSION_BOMB,
    UNSUPPORTED_IMAGE_FORMAT,
    CORRUPT_IMAGE,
)

# Pillow's format name -> the file extensions that declare it.
FORMAT_EXTENSIONS: Final = {
    "JPEG": ("jpg", "jpeg"),
    "MPO": ("jpg", "jpeg"),  # multi-picture JPEG (camera stereo shots): a JPEG to every viewer
    "PNG": ("png",),
    "WEBP": ("webp",),
    "GIF": ("gif",),
    "BMP": ("bmp",),
    "TIFF": ("tif", "tiff"),
}
# Pillow's own bound (Image.MAX_IMAGE_PIXELS): about 0.25 GB of RGB pixels.
DEFAULT_MAX_PIXELS: Final = 89_478_485
_WHITE: Final = (255, 255, 255)
_ORIENTATION: Final = 0x0112  # the EXIF tag


@dataclass(frozen=True)
class DecodedImage:
    """A validated image, normalized to upright 8-bit RGB, and what it was as landed."""

    image: Image.Image  # mode "RGB"
    format: str  # Pillow's name of the landed format: "JPEG", "PNG", ...
    source_mode: str  # the landed pixel mode: "RGB", "CMYK", "P", "I;16", ...
    frames: int  # 1, or the frame count of an animation (the first frame is kept)
    exif_rotated: bool  # an EXIF orientation was applied


@dataclass(frozen=True)
class ImageProblem:
    rule: str
    reason: str


def decode_image(
    data: bytes, declared_extension: str, max_pixels: int = DEFAULT_MAX_PIXELS
) -> DecodedImage | ImageProblem:
    """Decode `data` (declared as `declared_extension`, "" when unknown) to upright 8-bit RGB."""
    if not data:
        return ImageProblem(ZERO_BYTE_IMAGE, "the image file is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            # The limit below is the policy's, checked on the header; Pillow's own warning
            # (and its error at twice its limit) must not decide first.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        return ImageProblem(DECOMPRESSION_BOMB, f"the header claims too many pixels: {exc}")
    except UnidentifiedImageError:
        return ImageProblem(
            NOT_AN_IMAGE,
            f"{len(data):,} bytes that no image decoder recognises (starts {data[:12]!r})",
        )
    except (OSError, ValueError, SyntaxError) as exc:
        return ImageProblem(CORRUPT_IMAGE, f"the image header is damaged: {exc}")
    kind = image.format or "unknown"
    if kind not in FORMAT_EXTENSIONS:
        return ImageProblem(
            UNSUPPORTED_IMAGE_FORMAT,
            f"{kind} images are not accepted (accepted: {', '.join(sorted(FORMAT_EXTENSIONS))})",
        )
    extension = declared_extension.lower()
    if extension and extension not in FORMAT_EXTENSIONS[kind]:
        return ImageProblem(
            WRONG_EXTENSION, f"declared .{extension} but the bytes are a {kind} image"
        )
    width, height = image.size
    # Checked on the header, before any pixel is decoded: a bomb costs nothing to refuse.
    if width * height > max_pixels:
        return ImageProblem(
            DECOMPRESSION_BOMB,
            f"{width}x{height} = {width * height:,} pixels is over the limit of {max_pixels:,} "
            "(policy max_pixels)",
        )
    frames = int(getattr(image, "n_frames", 1))
    source_mode = image.mode
    try:
        with warnings.catch_warnings():
            # Pillow warns on EXIF it cannot parse; the orientation it can read is applied.
            warnings.simplefilter("ignore")
            image.load()
            # exif_transpose copies a frame even with nothing to turn: only when there is.
            orientation = image.getexif().get(_ORIENTATION, 1)
            upright = ImageOps.exif_transpose(image) if orientation not in (1, None) else image
    except OSError as exc:
        if "truncated" in str(exc) or "broken data stream" in str(exc):
            return ImageProblem(
                TRUNCATED_IMAGE, f"the {kind} data ends early ({len(data):,} bytes): {exc}"
            )
        return ImageProblem(CORRUPT_IMAGE, f"the {kind} data does not decode: {exc}")
    except (ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return ImageProblem(CORRUPT_IMAGE, f"the {kind} data does not decode: {exc}")
    rotated = upright is not image
    return DecodedImage(to_rgb(upright), kind, source_mode, frames, rotated)


def to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB: alpha and palette transparency composited on white, CMYK converted, 16-bit
    and float pixels scaled from their own range to 0..255."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") else max(float(pixels.max()), 1.0)
        scaled = np.clip(pixels / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return Image.fromarray(scaled, "L").convert("RGB")
    if (mode == "P" and "transparency" in image.info) or mode in ("PA", "LA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, _WHITE)
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")

"""Decoding, normalizing, hashing and resizing real photos and every edge case Pillow makes."""

from __future__ import annotations

import imagehash
import numpy as np
import pytest
from PIL import Image

from fm_assets.curation.images.decode import DecodedImage, ImageProblem, decode_image
from fm_assets.curation.images.hashing import hamming, phash, phash_hex, pixel_hash
from fm_assets.curation.images.resize import ResizePolicy, resize_and_encode, target_size
from tests.image_data import PHOTOS, edge_cases, encode, near_duplicates, photo

QUARANTINED = {
    "truncated": "truncated_image",
    "zero_byte": "zero_byte_image",
    "not_an_image": "not_an_image",
    "wrong_extension": "wrong_extension",
    "bomb": "decompression_bomb",
}


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[bytes, str]]:
    return edge_cases(photo("astronaut"))


@pytest.mark.parametrize("name", sorted(QUARANTINED))
def test_bad_files_are_refused_each_for_its_own_reason(
    cases: dict[str, tuple[bytes, str]], name: str
) -> None:
    data, extension = cases[name]
    result = decode_image(data, extension)
    assert isinstance(result, ImageProblem), name
    assert result.rule == QUARANTINED[name], result.reason


def test_a_bomb_is_refused_from_its_header_under_a_policy_limit() -> None:
    small = encode(photo("moon"), "PNG")
    result = decode_image(small, "png", max_pixels=100 * 100)
    assert isinstance(result, ImageProblem) and result.rule == "decompression_bomb"
    assert "512x512" in result.reason


@pytest.mark.parametrize(
    "name", ["cmyk", "sixteen_bit", "palette_alpha", "rgba", "progressive", "animated", "webp"]
)
def test_unusual_images_decode_to_8_bit_rgb(cases: dict[str, tuple[bytes, str]], name: str) -> None:
    data, extension = cases[name]
    result = decode_image(data, extension)
    assert isinstance(result, DecodedImage), result
    assert result.image.mode == "RGB" and result.image.size == (512, 512)
    pixels = np.asarray(result.image)
    assert pixels.dtype == np.uint8 and pixels.std() > 10  # a real picture, not a blank
    if name == "animated":
        assert result.frames == 3
    if name == "sixteen_bit":
        assert result.source_mode.startswith("I")


def test_alpha_is_composited_on_white() -> None:
    clear = Image.new("RGBA", (300, 200), (255, 0, 0, 0))
    result = decode_image(encode(clear, "PNG"), "png")
    assert isinstance(result, DecodedImage)
    assert np.asarray(result.image)[0, 0].tolist() == [255, 255, 255]


def test_exif_orientation_is_applied(cases: dict[str, tuple[bytes, str]]) -> None:
    upright = decode_image(encode(photo("rocket").convert("RGB"), quality=95), "jpg")
    rotated = decode_image(*_exif_rocket())
    assert isinstance(rotated, DecodedImage) and isinstance(upright, DecodedImage)
    assert rotated.exif_rotated and rotated.image.size == upright.image.size == (640, 427)
    assert not upright.exif_rotated  # no orientation tag: nothing turned
    assert hamming(phash(rotated.image), phash(upright.image)) <= 2


def _exif_rocket() -> tuple[bytes, str]:
    from tests.image_data import exif_rotated_jpeg

    return exif_rotated_jpeg(photo("rocket")), "jpg"


def test_phash_equals_imagehash_bit_for_bit(cases: dict[str, tuple[bytes, str]]) -> None:
    images = [photo(name) for name in PHOTOS]
    images += [photo("motorcycle_left"), photo("motorcycle_right")]
    for data, extension in cases.values():
        decoded = decode_image(data, extension)
        if isinstance(decoded, DecodedImage):
            images.append(decoded.image)
    images += list(near_duplicates(photo("coffee")).values())
    images.append(Image.new("RGB", (64, 64), (40, 40, 40)))  # flat: every coefficient ties
    for image in images:
        assert phash_hex(phash(image)) == str(imagehash.phash(image))


def test_near_duplicates_are_close_and_distinct_photos_far() -> None:
    base = photo("coffee")
    for name, copy in near_duplicates(base).items():
        assert hamming(phash(copy), phash(base)) <= 8, name
    distances = [
        hamming(phash(photo(a)), phash(photo(b)))
        for i, a in enumerate(PHOTOS)
        for b in PHOTOS[i + 1 :]
    ]
    assert min(distances) >= 20
    stereo = hamming(phash(photo("motorcycle_left")), phash(photo("motorcycle_right")))
    assert stereo <= 8  # two views of one scene: near-duplicates too


def test_pixel_hash_ignores_the_container_but_not_the_pixels() -> None:
    rgb = photo("chelsea").convert("RGB")
    png = decode_image(encode(rgb, "PNG"), "png")
    webp = decode_image(encode(rgb, "WEBP", lossless=True), "webp")
    jpeg = decode_image(encode(rgb, quality=95), "jpg")
    assert isinstance(png, DecodedImage) and isinstance(webp, DecodedImage)
    assert isinstance(jpeg, DecodedImage)
    assert pixel_hash(png.image) == pixel_hash(webp.image)
    assert pixel_hash(png.image) != pixel_hash(jpeg.image)


def test_resize_keeps_the_ratio_and_never_enlarges() -> None:
    assert target_size(1000, 500, 512) == (512, 256)
    assert target_size(300, 200, 512) == (300, 200)
    assert target_size(427, 640, 0) == (427, 640)
    data, width, height = resize_and_encode(
        photo("retina").convert("RGB"), ResizePolicy(max_side=256, format="webp", quality=80)
    )
    assert (width, height) == (256, 256)
    reopened = Image.open(__import__("io").BytesIO(data))
    assert reopened.format == "WEBP" and reopened.size == (256, 256)
    with pytest.raises(ValueError, match="resize format 'gif'"):
        ResizePolicy(format="gif")

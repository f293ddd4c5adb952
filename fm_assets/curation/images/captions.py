"""Alt text that says nothing about its image: file names, camera frame names and the handful of
placeholder words web pages put in `alt` ("image", "photo", "logo", "click here")."""

from __future__ import annotations

import re
from typing import Final

BOILERPLATE_CAPTION: Final = "boilerplate_caption"
PLACEHOLDERS: Final = frozenset(
    {
        "image",
        "img",
        "images",
        "photo",
        "photos",
        "picture",
        "pic",
        "untitled",
        "thumbnail",
        "thumb",
        "logo",
        "icon",
        "banner",
        "placeholder",
        "default",
        "null",
        "undefined",
        "none",
        "alt",
        "click here",
        "download",
        "advertisement",
        "spacer",
        "blank",
        "no image",
        "image not found",
    }
)
_FILE_NAME: Final = re.compile(
    r"^[\w\-. ()]+\.(jpe?g|png|gif|webp|bmp|tiff?|svg|heic|avif)$", re.IGNORECASE
)
# IMG_1234, DSC01234, DSCN0001, PICT0042, Screenshot_20200101, P1010123, 20190704_123456
_FRAME_NAME: Final = re.compile(
    r"^(img|dsc|dscn|dcim|pict|pxl|mvimg|screenshot|screen shot|p)[\s_\-]?\d{3,}[\w\-. ]*$"
    r"|^\d{8}[_\-]\d{6}\w*$",
    re.IGNORECASE,
)


def boilerplate(caption: str) -> str | None:
    """Why `caption` says nothing about its image, or None when it may."""
    text = " ".join(caption.split()).strip(" .:-_|")
    folded = text.lower()
    if folded in PLACEHOLDERS:
        return f"the caption is the placeholder {text!r}"
    if _FILE_NAME.match(text):
        return f"the caption is a file name ({text!r})"
    if _FRAME_NAME.match(text):
        return f"the caption is a camera or screenshot frame name ({text!r})"
    return None

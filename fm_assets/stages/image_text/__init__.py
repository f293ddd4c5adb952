"""The image-text pipeline's stages: landed pairs -> decoded, filtered, deduplicated, scored,
caption-curated and tokenized pairs (`execution/image_text_pipeline.py` orders them)."""

"""Contamination matcher quality: eval items planted in real documents, and clean documents.

`python -m bench.contamination_eval` writes `bench/results/contamination_eval.md`: section 1
(`sweep`) chooses the n-gram size and threshold; sections 2-5 (`defaults`) report recall per
benchmark and variant, the short-item rule, the clean documents flagged and redaction, at the
defaults. `documents` and `planting` build the inputs, `scoring` counts the outcomes;
`tests/test_contamination.py` imports them and asserts the targets on a sample.
"""

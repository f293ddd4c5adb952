"""Soak: hundreds of small batches through the sensor in one FM_HOME; per-batch cost and
catalog bytes as they accumulate, and many batches landed at once under a real daemon."""

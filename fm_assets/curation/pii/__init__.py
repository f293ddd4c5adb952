"""PII detection (`addresses`, `numbers`) and redaction with audit records (`redaction`)."""
